"""``python -m nas.space [search_space=<name or path>] [samples=200] [seed=0]``."""

from __future__ import annotations

from omegaconf import DictConfig

from nas.cli._common import fmt_table, hydra_app, user_errors
from nas.config.space import register_space_configs
from nas.space import list_spaces, load_space, summarize

register_space_configs()


def _si(v: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= div:
            return f"{v / div:.2f}{unit}"
    return f"{v:.0f}"


@user_errors
def run(cfg: DictConfig) -> list[dict]:
    names = [cfg.search_space] if cfg.search_space else list_spaces()
    if cfg.samples < 1:
        raise ValueError(f"samples must be >= 1, got {cfg.samples}")
    rows, out = [], []
    for n in names:
        s = summarize(load_space(n), samples=cfg.samples, seed=cfg.seed)
        out.append(s)
        p, m = s["params"], s["macs"]
        rows.append([
            s["name"], f"{s['resolution']}", f"{s['size']:.3e}", s["unique_blocks"],
            f"{_si(p['min'])} / {_si(p['median'])} / {_si(p['max'])}",
            f"{_si(m['min'])} / {_si(m['median'])} / {_si(m['max'])}",
        ])
    print(fmt_table(rows, ["space", "res", "size (archs)", "unique blocks",
                           "params min/median/max", "MACs min/median/max"]))
    print(f"(params and MACs over {cfg.samples} seeded samples, seed={cfg.seed}; MACs at each space's resolution)")
    return out


@hydra_app("space")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()

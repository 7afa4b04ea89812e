"""``python -m nas.export weights=<ckpt> [arch=<arch file>] precision=fp32|int8``: ONNX export + verification.

Thin Hydra entry point over ``nas.train.deploy.export_checkpoint``: exports the checkpoint (a float
one: fp32, or int8 by onnxruntime's static PTQ; a QAT one: its own QDQ int8), checks onnxruntime
against torch (max abs difference for fp32, top-1 agreement for int8) and shows the exported
model's latency measured on this machine next to its prediction, when the target is this CPU.
``arch`` takes any Arch file ``nas.train`` writes (``arch.json``, ``pruned_arch.json``,
``prune_plan.json``, ``export/<variant>.json``), or is left out: the checkpoint records its Arch.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import MISSING, DictConfig, OmegaConf

from nas import train
from nas._io import not_a_torch_file
from nas.cli._common import file_error, hydra_app, user_errors
from nas.config.export import register_export_configs
from nas.export import check_format
from nas.target import Target, load_target
from nas.train.settings import ExportSettings

register_export_configs()

_CHECKPOINTS = "a .ckpt that python -m nas.train wrote (fp32.ckpt, pruned.ckpt, qat.ckpt under <run>/train/<model>/)"


#: the target an edge format exports for when no conf= is given: its runtime on a CPU (``_int8`` for int8)
EDGE_CPU_TARGETS = {"pte": "executorch_cpu", "openvino": "openvino_cpu", "tflite": "litert_cpu"}


@user_errors
def run(cfg: DictConfig) -> dict:
    c = OmegaConf.to_container(cfg, resolve=True)
    if c["weights"] in (None, "", MISSING):
        raise ValueError(f"give weights=<checkpoint>: {_CHECKPOINTS}")
    if not Path(c["weights"]).expanduser().is_file():  # before torch loads to read it
        raise FileNotFoundError(f"weights={c['weights']}: no such file; give {_CHECKPOINTS}")
    why = not_a_torch_file(Path(c["weights"]).expanduser())
    if why:
        raise ValueError(f"weights={c['weights']}: not a torch checkpoint ({why}); give {_CHECKPOINTS}")
    problem = file_error("out", c["out"]) if c["out"] else None
    if problem:
        raise ValueError(problem)
    check_format(c["format"])
    target = Target.coerce(c["target"]) if c["target"] else None  # None: the checkpoint's (nas.train records it)
    if c["format"] != "onnx":  # ExecuTorch .pte, OpenVINO IR or LiteRT .tflite: nas.train.deploy_edge
        if target is None:  # the format's runtime on this CPU, at the export's precision
            name = EDGE_CPU_TARGETS[c["format"]] + ("_int8" if c["precision"] == "int8" else "")
            target = load_target(name)
            print(f"target:    {name} (the format's CPU target; conf=<target> for another)")
        rec = train.export_edge(fmt=c["format"], arch_path=c["arch"], weights=c["weights"], precision=c["precision"],
                                target=target, out=c["out"], data=c["data"], verify_samples=c["verify_samples"],
                                overwrite=c["overwrite"], allow_mismatch=c["allow_mismatch"],
                                export=ExportSettings(**c["export"]), data_root=c["data_root"])
        print("\n".join(train.edge_summary(rec)))
        return rec
    rec = train.export_checkpoint(  # torch loads here, once the command's own checks passed
        arch_path=c["arch"], weights=c["weights"], precision=c["precision"], target=target, out=c["out"],
        data=c["data"], verify_samples=c["verify_samples"], overwrite=c["overwrite"],
        allow_mismatch=c["allow_mismatch"], export=ExportSettings(**c["export"]), data_root=c["data_root"],
    )
    v = rec["verify"]
    t = rec["target"]
    of = f"the {rec['precision']} target of {t['of']}, " if t["of"] != t["name"] else ""
    print(f"target:    {t['name']} ({of}{t['from']}{'' if t['from'] == 'given' else '; conf=<target> for another'})")
    if rec.get("int8_form_mismatch"):
        print(f"WARNING: {rec['int8_form_mismatch']} (allow_mismatch)")
    print(f"exported {rec['precision']} ({rec['how']}): {rec['onnx']} ({rec['file_bytes'] / 1024:.1f} KiB, "
          f"{rec['params']:,} params, input {'x'.join(map(str, rec['input_shape']))})")
    check = (f"max |onnxruntime - torch| = {v['max_abs_diff']:.3g}" if rec["precision"] == "fp32"
             else f"top-1 agreement with {v['against']}: {100 * v['top1_agreement']:.2f}%")
    acc = f"; accuracy {100 * v['onnx_accuracy']:.2f}%" if "onnx_accuracy" in v else ""
    print(f"verified on {v['samples']} {v['inputs']}: {check}{acc}")
    if rec["predicted"]:
        print(f"predicted: {rec['predicted']['label']} [target {rec['predicted']['target']}]")
    else:
        print(f"predicted: no {rec['precision']} target to predict with")
    if rec["measured"]:
        m = rec["measured"]
        print(f"measured:  {m['median_ms']:.4f} ms on this machine (p10 {m['p10_ms']:.4f}, p90 {m['p90_ms']:.4f}); "
              f"prediction error {rec['error_pct']:+.1f}%")
    else:
        print("measured:  not measured (the target is not this machine)")
    print(f"report:    {rec['onnx'].rsplit('.', 1)[0]}.json")
    if rec.get("card"):
        print(f"card:      {rec['card']} (input, preprocessing, classes, accuracy, latency: docs/train.md)")
    return rec


@hydra_app("export")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()

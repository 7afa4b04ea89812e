"""Streamed datasets (cifar10, imagefolder): read per batch through torchvision + a DataLoader, with
timm's transforms; on tiny fake data written here, never the network."""

import os

import numpy as np
import pytest
import torch

from nas.data import Split, StreamSplit, adapt_arch, load_data
from nas.space import load_space


def _folder(root, classes=("ant", "bee", "cat"), n=5, size=(20, 14)):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (*size[::-1], 3), dtype=np.uint8)).save(root / c / f"{i}.png")
    return root


@pytest.fixture
def opens(monkeypatch):
    """Counts the images PIL opens."""
    from PIL import Image

    count = [0]
    real = Image.open

    def counting(*a, **k):
        count[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(Image, "open", counting)
    return count


def _load(root, **kw):
    return load_data({"name": "imagefolder", "root": str(root), "resolution": 16, "val_fraction": 0.4,
                      "num_workers": 0, **kw})


def test_images_are_read_per_batch_not_held(tmp_path, opens):
    d = _load(_folder(tmp_path))
    assert opens[0] == 15  # the loading decodes each image once (nas.data.verify) and holds none
    assert d.streamed and isinstance(d.train, StreamSplit) and not hasattr(d.train, "images")
    x, y = next(d.batches("train", batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0)))
    assert opens[0] == 15 + 4 and x.shape == (4, 3, 16, 16) and len(y) == 4
    digits = load_data({"name": "digits", "resolution": 8})
    assert not digits.streamed and isinstance(digits.train, Split)  # the small embedded ones stay in memory


@pytest.mark.parametrize("kw", [{}, {"augment": "crop_flip"}, {"augment": "crop", "auto_augment": "rand-m9-mstd0.5"}])
def test_transforms_give_the_configured_resolution(tmp_path, kw):
    d = _load(_folder(tmp_path), resolution=24, **kw)
    g = torch.Generator().manual_seed(1)
    (xt, _), = list(d.batches("train", batch_size=len(d.train), shuffle=True, generator=g, augment=True))
    (xv, _), = list(d.batches("val", batch_size=64))
    assert xt.shape == (len(d.train), 3, 24, 24) and xv.shape == (len(d.val), 3, 24, 24)
    plain = next(d.batches("train", batch_size=len(d.train), shuffle=True, generator=torch.Generator().manual_seed(1)))
    assert torch.equal(plain[1], next(d.batches("train", batch_size=len(d.train), shuffle=True,
                                                generator=torch.Generator().manual_seed(1)))[1])  # seeded order
    assert torch.equal(xt, plain[0]) == (not kw)  # augmentation changes the training images only when asked
    again = next(d.batches("val", batch_size=64))[0]
    assert torch.equal(xv, again)  # scoring is deterministic (resize + centre crop)


def test_worker_processes_give_the_same_batches(tmp_path):
    root = _folder(tmp_path)
    kw = {"augment": "crop_flip", "auto_augment": "rand-m9-mstd0.5"}
    a, b = _load(root, **kw), _load(root, num_workers=2, **kw)

    def batch(d, seed):
        return next(d.batches("train", batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(seed),
                              augment=True))

    xa, ya = batch(a, 5)
    for _ in range(2):  # the second pass reuses the persistent workers, which keep no random state
        xb, yb = batch(b, 5)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(batch(b, 6)[0], xa)
    loader, _ = next(iter(b.train._loaders.values()))
    assert loader.num_workers == 2 and loader.persistent_workers and len(b.train._loaders) == 1


def test_the_trainer_runs_on_a_streamed_dataset(tmp_path):
    from nas.search.evaluate import TrainEvaluator

    d = _load(_folder(tmp_path), augment="crop_flip")
    arch = adapt_arch(load_space("tiny").random(0), d)
    res = TrainEvaluator(epochs=1, batch_size=4, device="cpu", bn_recalibration_batches=1).evaluate(arch, d, seed=0)
    assert res.metrics["steps"] == len(d.train) // 4 and 0 <= res.score <= 1
    x = d.images("train", torch.tensor([0, 2]))
    assert x.shape == (2, 3, 16, 16)


def test_in_memory_datasets_refuse_auto_augment():
    with pytest.raises(ValueError, match=r"auto_augment='rand-m9'.*held in memory.*remove it"):
        load_data({"name": "digits", "auto_augment": "rand-m9"})


@pytest.mark.parametrize("kw, match", [({"num_workers": -1}, "num_workers must be an integer >= 0"),
                                       ({"crop_scale": 0}, r"crop_scale must be in \(0, 1\]"),
                                       ({"crop_pct": 1.5}, r"crop_pct must be in \(0, 1\]")])
def test_loader_settings_are_validated(kw, match):
    with pytest.raises(ValueError, match=match):
        load_data({"name": "digits", **kw})


@pytest.mark.gpu
def test_batches_for_cuda_come_from_pinned_memory(tmp_path):
    d = _load(_folder(tmp_path), num_workers=1)
    x, y = next(d.batches("val", batch_size=4, device="cuda"))
    assert x.is_cuda and y.is_cuda and x.shape == (4, 3, 16, 16)
    loader, _ = next(iter(d.val._loaders.values()))
    assert loader.pin_memory


def _break(root):
    """A truncated JPEG in ant/ and a PNG that is not one in bee/: (their paths)."""
    from PIL import Image

    jpg, png = root / "ant" / "0.jpg", root / "bee" / "0.png"
    Image.new("RGB", (20, 14), (9, 99, 199)).save(jpg, quality=95)
    (root / "ant" / "0.png").unlink()
    jpg.write_bytes(jpg.read_bytes()[:300])
    png.write_bytes(b"\x89PNG\r\n\x1a\nnot a png")
    return jpg, png


def test_unreadable_images_are_named_and_skipped(tmp_path, caplog):
    jpg, png = _break(_folder(tmp_path, n=6))
    d = _load(tmp_path, test_fraction=0.2)
    assert len(d.train) + len(d.val) + len(d.test) == 18 - 2
    assert [b.path for b in d.skipped] == [str(jpg), str(png)] or [b.path for b in d.skipped] == [str(png), str(jpg)]
    assert d.describe().endswith(f"; 2 unreadable images skipped (first: {d.skipped[0]})")
    reasons = {b.path: b.reason for b in d.skipped}
    assert "Truncated File Read" in reasons[str(jpg)] or "truncated" in reasons[str(jpg)]
    assert reasons[str(png)] == "not an image PIL can identify"
    assert f"skipping unreadable image {jpg}" in caplog.text
    for split in ("train", "val", "test"):  # what is left reads
        for _ in d.batches(split, batch_size=4):
            pass


def test_unreadable_images_stop_the_loading_without_skip_bad_or_beyond_the_limit(tmp_path, monkeypatch):
    from nas.data import verify

    jpg, png = _break(_folder(tmp_path, n=6))
    with pytest.raises(ValueError, match=r"unreadable image .*0\.(jpg|png): .*data\.skip_bad=true"):
        _load(tmp_path, skip_bad=False)
    monkeypatch.setattr(verify, "MIN_MAX_BAD", 1)
    with pytest.raises(ValueError, match=r"2 of 18 images in .* are unreadable, more than data.skip_bad leaves out "
                                         r"\(1\); first: .*0\.(jpg|png) \("):
        _load(tmp_path)
    with pytest.raises(ValueError, match="data.skip_bad must be true or false"):
        _load(tmp_path, skip_bad="yes")


def test_an_image_broken_after_the_loading_is_named_when_read(tmp_path):
    d = _load(_folder(tmp_path))
    path = d.train.base.samples[int(d.train.indices[0])][0]
    with open(path, "wb") as f:
        f.write(b"gone")
    with pytest.raises(OSError, match=f"unreadable image {path}: UnidentifiedImageError"):
        for _ in d.batches("train", batch_size=2):
            pass


def test_a_folder_is_decoded_once_not_at_every_load(tmp_path, monkeypatch):
    """The check's result is kept per set of files (paths, sizes, modification times): a second load
    decodes nothing and finds the same unreadable images; a file that changes is decoded again."""
    from nas.data import verify

    jpg, png = _break(_folder(tmp_path, n=6))
    first = _load(tmp_path)
    calls = []
    real = verify.image_problem
    monkeypatch.setattr(verify, "image_problem", lambda p: calls.append(p) or real(p))
    again = _load(tmp_path)
    assert calls == [] and [b.path for b in again.skipped] == [b.path for b in first.skipped]
    os.utime(jpg, ns=(1, 1))  # the file changed: that set of files is checked again
    _load(tmp_path)
    assert str(jpg) in calls

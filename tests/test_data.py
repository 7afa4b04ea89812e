"""Datasets: digits fully; cifar10, imagefolder and Fashion-MNIST files on tiny fake data; never the network."""

import errno
import gzip
import logging
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from nas.data import (
    DEBIAN_FASHION_MNIST,
    DatasetNotFoundError,
    DataSettings,
    adapt_arch,
    dataset_names,
    load_data,
    read_idx,
)
from nas.space import load_space


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """Any attempt to download fails the test."""
    import urllib.request

    def boom(*a, **k):
        raise AssertionError("a test tried to use the network")

    monkeypatch.setattr(urllib.request, "urlopen", boom)
    monkeypatch.setattr(urllib.request, "urlretrieve", boom)


def test_registry():
    assert {"digits", "fashion_mnist", "cifar10", "imagefolder"} <= set(dataset_names())
    with pytest.raises(ValueError, match="unknown dataset 'mnist'.*digits"):
        DataSettings(name="mnist")


@pytest.mark.parametrize(
    "kw, match",
    [({"resolution": 0}, "data.resolution"), ({"val_fraction": 1.5}, "val_fraction"),
     ({"augment": "mixup"}, "data.augment.*crop_flip"), ({"train_samples": -3}, "train_samples"),
     ({"channels": 2}, "channels")],
)
def test_settings_are_validated(kw, match):
    with pytest.raises(ValueError, match=match):
        DataSettings(name="digits", **kw)
    with pytest.raises(ValueError, match="unknown key.*resolutoin"):
        DataSettings.from_dict({"name": "digits", "resolutoin": 16})


def test_digits():
    d = load_data({"name": "digits", "resolution": 16, "val_fraction": 0.2})
    assert d.in_chans == 1 and d.num_classes == 10 and d.resolution == 16
    assert len(d.train) + len(d.val) == 1797 and d.test is None
    assert d.train.images.shape[1:] == (1, 16, 16) and d.train.images.dtype == torch.uint8
    assert abs(len(d.val) / 1797 - 0.2) < 0.01
    # stratified: every class in val, in proportion
    counts = torch.bincount(d.val.labels, minlength=10)
    assert counts.min() >= 30
    # normalised batches have ~zero mean, unit std
    x, y = next(d.batches("train", batch_size=len(d.train)))
    assert abs(float(x.mean())) < 0.05 and abs(float(x.std()) - 1) < 0.05 and y.dtype == torch.long
    # the same seed gives the same split; another seed another one
    again = load_data({"name": "digits", "resolution": 16, "val_fraction": 0.2})
    assert torch.equal(again.val.labels, d.val.labels) and torch.equal(again.val.images, d.val.images)
    other = load_data({"name": "digits", "resolution": 16, "val_fraction": 0.2, "seed": 1})
    assert not torch.equal(other.val.images, d.val.images)


def test_subsampling_resolution_and_augmentation():
    d = load_data(DataSettings(name="digits", resolution=12, train_samples=100, val_samples=50, augment="crop_flip"))
    assert len(d.train) == 100 and len(d.val) == 50 and d.train.images.shape[-1] == 12
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a = next(d.batches("train", batch_size=32, shuffle=True, generator=g1, augment=True))[0]
    b = next(d.batches("train", batch_size=32, shuffle=True, generator=g2, augment=True))[0]
    assert torch.equal(a, b)  # seeded
    plain = next(d.batches("train", batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(3)))[0]
    assert a.shape == plain.shape and not torch.equal(a, plain)
    batches = list(d.batches("val", batch_size=16, drop_last=True))
    assert len(batches) == 3 and all(len(y) == 16 for _, y in batches)
    with pytest.raises(ValueError, match="no 'test' split"):
        next(d.batches("test", batch_size=8))


def test_adapt_arch():
    d = load_data({"name": "digits", "resolution": 16, "train_samples": 20})
    a = load_space("tiny").random(0)
    t = adapt_arch(a, d)
    assert (t.in_chans, t.head.num_classes, t.resolution) == (1, 10, 16)
    assert t.blocks == a.blocks
    assert adapt_arch(a, d, resolution=32).resolution == 32


# ------------------------------------------------------------------------------------------- fake data


def _write_idx(path, arr, gz):
    arr = np.asarray(arr, dtype=np.uint8)
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in arr.shape)
    data = header + arr.tobytes()
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def _fake_fashion(folder, *, gz, n=60, n_test=20):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    _write_idx(folder / "train-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)), gz)
    _write_idx(folder / "train-labels-idx1-ubyte", np.arange(n) % 10, gz)
    _write_idx(folder / "t10k-images-idx3-ubyte", rng.integers(0, 256, (n_test, 28, 28)), gz)
    _write_idx(folder / "t10k-labels-idx1-ubyte", np.arange(n_test) % 10, gz)


@pytest.mark.parametrize("layout", ["debian_gz", "torchvision_raw"])
def test_fashion_mnist_from_a_root(tmp_path, layout):
    if layout == "debian_gz":
        _fake_fashion(tmp_path, gz=True)
    else:
        _fake_fashion(tmp_path / "FashionMNIST" / "raw", gz=False)
    d = load_data({"name": "fashion_mnist", "root": str(tmp_path), "resolution": 32, "val_fraction": 0.2})
    assert d.in_chans == 1 and d.resolution == 32 and len(d.train) == 50 and len(d.val) == 10  # 1 of 6 per class
    assert d.test is not None and len(d.test) == 20 and d.classes[0] == "T-shirt/top"


def test_read_idx_rejects_garbage(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"not an idx file")
    with pytest.raises(ValueError, match="IDX"):
        read_idx(p)


def test_fashion_mnist_missing_says_where_and_how(tmp_path, monkeypatch):
    from torchvision.datasets import FashionMNIST

    monkeypatch.setattr(FashionMNIST, "download", lambda self: pytest.fail("downloaded without download=true"))
    with pytest.raises(DatasetNotFoundError) as e:
        load_data({"name": "fashion_mnist", "root": str(tmp_path / "nowhere"), "resolution": 32})
    msg = str(e.value)
    assert str(tmp_path / "nowhere") in msg and "apt-get install dataset-fashion-mnist" in msg
    assert "data.download=true" in msg


@pytest.mark.skipif(not (DEBIAN_FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file(),
                    reason="the Debian package dataset-fashion-mnist is not installed")
def test_fashion_mnist_debian_package():
    d = load_data({"name": "fashion_mnist", "resolution": 32, "train_samples": 500, "val_samples": 100})
    assert d.source == str(DEBIAN_FASHION_MNIST) and len(d.train) == 500 and len(d.test) == 10000


def _fake_cifar(root, n=20):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / name, "wb") as f:
            pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "labels": list(np.arange(n) % 10)}, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)


@pytest.fixture
def fake_cifar_ok(monkeypatch):
    """torchvision checks the CIFAR-10 files' MD5 sums; the fake files pass when they exist."""
    import os

    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))


def test_cifar10_fake(tmp_path, fake_cifar_ok):
    _fake_cifar(tmp_path)
    d = load_data({"name": "cifar10", "root": str(tmp_path), "resolution": 16, "val_fraction": 0.1,
                   "augment": "crop_flip", "num_workers": 0})
    assert d.streamed and d.in_chans == 3 and len(d.train) + len(d.val) == 100 and len(d.test) == 20
    assert d.classes[3] == "c3"
    for split in ("train", "val", "test"):
        x, y = next(d.batches(split, batch_size=8, augment=split == "train"))
        assert x.shape == (8, 3, 16, 16) and x.dtype == torch.float32 and y.dtype == torch.long
    # data.root may name the batches folder itself
    d2 = load_data({"name": "cifar10", "root": str(tmp_path / "cifar-10-batches-py"), "resolution": 16,
                    "val_fraction": 0.1, "num_workers": 0})
    assert torch.equal(d2.val.labels, d.val.labels)
    with pytest.raises(DatasetNotFoundError, match="cifar-10-batches-py"):
        load_data({"name": "cifar10", "root": str(tmp_path / "empty"), "resolution": 32})
    with pytest.raises(DatasetNotFoundError, match="needs data.root"):
        load_data({"name": "cifar10", "resolution": 32})
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DatasetNotFoundError, match="extract the python version there again"):
        load_data({"name": "cifar10", "root": str(tmp_path), "resolution": 32})


def _fake_images(folder, classes=("cat", "dog"), n=6, size=(20, 14)):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in classes:
        (folder / c).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (*size[::-1], 3), dtype=np.uint8)).save(folder / c / f"{i}.png")


@pytest.mark.parametrize("channels", [1, 3])
def test_imagefolder_split_here(tmp_path, channels):
    _fake_images(tmp_path)
    d = load_data({"name": "imagefolder", "root": str(tmp_path), "resolution": 8, "channels": channels,
                   "val_fraction": 0.34, "num_workers": 0})
    assert d.classes == ("cat", "dog") and d.in_chans == channels
    assert len(d.test) == 2 and len(d.val) == 4 and len(d.train) == 6  # the 10% hold-out first, then val
    assert sorted(d.val.labels.tolist()) == [0, 0, 1, 1]  # stratified
    x, _ = next(d.batches("train", batch_size=6, shuffle=True, generator=torch.Generator().manual_seed(0),
                          augment=True))
    assert x.shape == (6, channels, 8, 8)


def test_imagefolder_train_val_folders(tmp_path):
    _fake_images(tmp_path / "train")
    _fake_images(tmp_path / "val", n=2)
    d = load_data({"name": "imagefolder", "root": str(tmp_path), "resolution": 8, "num_workers": 0})
    assert len(d.train) == 10 and len(d.val) == 4 and len(d.test) == 2 and d.test_source.startswith("held out")
    _fake_images(tmp_path / "test", n=3)  # root/test/ is the test split: nothing is carved
    d = load_data({"name": "imagefolder", "root": str(tmp_path), "resolution": 8, "num_workers": 0})
    assert len(d.train) == 12 and len(d.val) == 4 and len(d.test) == 6
    assert d.test_source == "the dataset's own test split"


def test_test_split_is_carved_once_and_never_trained_or_searched_on(tmp_path):
    """The hold-out is the same whatever data.seed, val_fraction or train_samples say (a fixed seed,
    carved before them), recorded by a digest of its files, and disjoint from train and val."""
    _fake_images(tmp_path, n=20)
    base = {"name": "imagefolder", "root": str(tmp_path), "resolution": 8, "num_workers": 0}
    a = load_data(base)
    b = load_data({**base, "seed": 5, "val_fraction": 0.5, "train_samples": 3, "root": str(tmp_path) + "/"})
    assert len(a.test) == 4 and a.test_source == b.test_source and "files digest" in a.test_source
    held = set(a.test.indices.tolist())
    assert not held & set(a.train.indices.tolist()) and not held & set(a.val.indices.tolist())
    assert not held & set(b.train.indices.tolist()) and not held & set(b.val.indices.tolist())
    assert load_data({**base, "test_fraction": 0}).test is None
    d = load_data({"name": "digits", "test_fraction": 0.1})  # in memory too, on request
    assert len(d.test) == 179 and len(d.train) + len(d.val) + len(d.test) == 1797
    assert load_data({"name": "digits"}).test is None  # digits' default: no hold-out (nas.train says it reports val)
    with pytest.raises(ValueError, match=r"data.test_fraction must be in \[0, 0.5\)"):
        load_data({**base, "test_fraction": 0.7})


def test_imagefolder_errors(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="not a folder"):
        load_data({"name": "imagefolder", "root": str(tmp_path / "nope"), "resolution": 8})
    (tmp_path / "only").mkdir()
    with pytest.raises(DatasetNotFoundError, match="at least two class folders"):
        load_data({"name": "imagefolder", "root": str(tmp_path), "resolution": 8})


def _files_of(d, split):
    s = getattr(d, split)
    return [os.path.realpath(s.base.samples[i][0]) for i in s.indices.tolist()]


def test_imagefolder_follows_no_link_twice(tmp_path, caplog):
    """A link back to a parent (``cat/loop -> ..``) and a class folder that is a link to another class list
    each file once: no file in two splits, no path through the loop, no flood of ``skipping`` lines."""
    _fake_images(tmp_path, n=10)
    os.symlink("..", tmp_path / "cat" / "loop")
    os.symlink(tmp_path / "dog", tmp_path / "puppy")  # a class folder linked to another
    with caplog.at_level(logging.WARNING, logger="nas"):
        d = load_data({"name": "imagefolder", "root": str(tmp_path), "resolution": 8, "num_workers": 0})
    files = [f for split in ("train", "val", "test") for f in _files_of(d, split)]
    assert len(files) == len(set(files)) == 20
    assert not any("loop" in s[0] for s in d.train.base.samples)
    assert not any("skipping" in r.message for r in caplog.records)
    assert any("puppy holds no image" in r.message for r in caplog.records)  # its files are dog's, counted there


def test_an_unreadable_class_folder_is_an_error(tmp_path, monkeypatch):
    """A class folder this user cannot list (mode 000: the tests run as root, which reads it anyway, so
    ``os.scandir`` refuses it as the kernel refuses an unprivileged user: EACCES) is named, never a
    class of 0 images."""
    _fake_images(tmp_path, classes=("cat", "dog", "owl"))
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path).rstrip("/").endswith("owl"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(ValueError, match=f"cannot read the folder {tmp_path / 'owl'} \\(Permission denied\\)"):
        load_data({"name": "imagefolder", "root": str(tmp_path), "resolution": 8, "num_workers": 0})


def test_an_empty_class_folder_is_named(tmp_path, caplog):
    _fake_images(tmp_path)
    (tmp_path / "owl").mkdir()
    with caplog.at_level(logging.WARNING, logger="nas"):
        d = load_data({"name": "imagefolder", "root": str(tmp_path), "resolution": 8, "num_workers": 0})
    assert d.classes == ("cat", "dog", "owl")
    assert any(f"{tmp_path / 'owl'} holds no image" in r.message for r in caplog.records)


def test_the_built_in_dataset_names_are_the_loaders_registered():
    """``dataset_names`` answers without loading the loaders (a config checks ``data=`` before torch loads):
    its built-in list must be what ``nas.data.loaders`` registers, no more, no less."""
    code = ("import sys; from nas.data.datasets import BUILT_IN_DATASETS, DATASET_LOADERS; assert not DATASET_LOADERS.names(); "
            "heavy = [m for m in ('torch', 'sklearn', 'timm', 'torchvision') if m in sys.modules]; assert not heavy, heavy; "
            "import nas.data.loaders; assert sorted(DATASET_LOADERS.names()) == sorted(BUILT_IN_DATASETS), DATASET_LOADERS.names()")
    subprocess.run([sys.executable, "-c", code], check=True)

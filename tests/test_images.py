"""Image data: listing, bad files, modes, transforms, batches and models (tiny generated images)."""

from __future__ import annotations

import csv
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from entrena.data.image_batches import (
    Augmentation,
    ImageBatches,
    ImageTransforms,
    channel_stats,
    decode_resized,
)
from entrena.data.images import choose_channels, decode_image, list_images, scan_images
from entrena.errors import ConfigError, DataError
from entrena.tasks.image_classification.model import (
    build_image_classifier,
    load_image_classifier,
    resolve_image_model,
    save_image_classifier,
)


def write_image(path: Path, value: int, size: int = 12, mode: str = "L") -> Path:
    """A ``size`` × ``size`` image: a bright square on the left (class 0) or right (class 1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.full((size, size), 20, dtype=np.uint8)
    half = size // 2
    if value == 0:
        pixels[2:-2, 1:half] = 230
    else:
        pixels[2:-2, half:-1] = 230
    image = Image.fromarray(pixels, mode="L")
    if mode != "L":
        image = image.convert(mode)
    image.save(path)
    return path


def image_folder(root: Path, per_class: int = 6, classes: tuple[str, ...] = ("left", "right"),
                 mode: str = "L") -> Path:
    for value, name in enumerate(classes):
        for i in range(per_class):
            write_image(root / name / f"{i:03d}.png", value % 2, mode=mode)
    return root


def test_folder_listing_and_scan(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train")
    (root / "left" / ".DS_Store").write_bytes(b"junk")
    (root / "stray.png").write_bytes((root / "left" / "000.png").read_bytes())
    listing = list_images(root)
    assert len(listing.paths) == 12 and set(listing.labels) == {"left", "right"}
    scanned = scan_images(listing)
    assert len(scanned) == 12
    assert scanned.skipped == [{"path": str(root / "stray.png"),
                                "reason": "outside any class folder"}]
    assert scanned.sizes.tolist()[0] == [12, 12] and scanned.modes[0] == "L"
    # identical pixels in both classes' files → equal hashes across files of one class
    assert scanned.sha256[0] == scanned.sha256[1]


def test_truncated_and_non_image_files_are_skipped_and_counted(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train")
    good = write_image(tmp_path / "big.jpg", 0, size=64, mode="RGB").read_bytes()
    (root / "left" / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (root / "right" / "notes.txt").write_text("not an image\n")
    scanned = scan_images(list_images(root), threads=2)
    assert len(scanned) == 12
    reasons = {Path(s["path"]).name: s["reason"] for s in scanned.skipped}
    assert reasons["notes.txt"] == "not an image Pillow can read"
    assert reasons["truncated.jpg"].startswith("damaged image")
    with pytest.raises(DataError, match=r"truncated\.jpg: damaged image .*on_bad_rows: skip"):
        scan_images(list_images(root), on_bad_rows="error")


def huge_png(path: Path, width: int = 20000, height: int = 20000) -> Path:
    """A PNG whose header says ``width`` x ``height`` (no pixel data: Pillow refuses it on
    opening, before decoding)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                     + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))
    return path


def test_a_decompression_bomb_is_a_skipped_file_with_the_pixel_limit(tmp_path: Path) -> None:
    # It once ended prepare/train/predict with "internal error: DecompressionBombError".
    root = image_folder(tmp_path / "train")
    bomb = huge_png(root / "left" / "huge.png")
    scanned = scan_images(list_images(root))
    assert len(scanned) == 12
    assert scanned.skipped == [{"path": str(bomb), "reason": (
        "too large: 400,000,000 pixels, above the limit of 178,956,970 (Pillow's "
        "decompression-bomb guard); shrink the image")}]
    with pytest.raises(DataError) as raised:
        scan_images(list_images(root), on_bad_rows="error")
    assert str(raised.value).startswith(f"{bomb}: too large: 400,000,000 pixels, above the limit")


def test_any_decoder_failure_is_a_skipped_file(tmp_path: Path, monkeypatch) -> None:
    import entrena.data.images as images

    root = image_folder(tmp_path / "train", per_class=2)

    def broken(data: bytes):
        raise IndexError("tuple index out of range")

    monkeypatch.setattr(images, "_open", broken)
    scanned = scan_images(list_images(root))
    assert {s["reason"] for s in scanned.skipped} == {
        "damaged image (IndexError: tuple index out of range)"}


def test_a_few_colour_images_making_the_model_rgb_are_named(tmp_path: Path, caplog) -> None:
    root = image_folder(tmp_path / "train")
    colour = write_image(root / "left" / "colour.png", 0, mode="RGB")
    scan_images(list_images(root), role="validation")
    assert "3 channels" not in caplog.text  # the training images decide
    scanned = scan_images(list_images(root))
    assert choose_channels(scanned.modes) == 3
    assert (f"the model gets 3 channels because 1 of 13 training images is in colour: {colour} "
            "(RGB); the other 12 are grayscale: convert it to grayscale (or remove it) for a "
            "1-channel model") in caplog.text
    caplog.clear()
    scan_images(list_images(image_folder(tmp_path / "rgb", mode="RGB")))
    assert "3 channels" not in caplog.text  # colour is the rule there, not a stray file


def test_csv_of_paths_relative_to_the_csv(tmp_path: Path) -> None:
    image_folder(tmp_path / "images")
    rows = [(f"images/left/{i:03d}.png", "left") for i in range(3)]
    rows += [("images/right/000.png", ""), ("images/missing.png", "right")]
    csv_path = tmp_path / "data" / "train.csv"
    csv_path.parent.mkdir()
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "label"])
        writer.writerows([(f"../{p}", label) for p, label in rows])
    listing = list_images(csv_path)
    assert listing.rows == [2, 3, 4, 6]
    assert listing.skipped == [{"path": f"{csv_path}:5", "reason": "empty label"}]
    scanned = scan_images(listing)
    assert len(scanned) == 3
    assert scanned.skipped[-1]["reason"] == "missing file"
    with pytest.raises(DataError, match=r"train\.csv:5: empty label"):
        list_images(csv_path, on_bad_rows="error")
    with pytest.raises(DataError, match="column 'path' not found"):
        list_images(csv_path, path_column="path")


def test_a_folder_without_class_folders_is_refused(tmp_path: Path) -> None:
    write_image(tmp_path / "flat" / "a.png", 0)
    with pytest.raises(DataError, match="one subfolder per class"):
        list_images(tmp_path / "flat")


def test_mixed_modes_are_converted(tmp_path: Path) -> None:
    gray = write_image(tmp_path / "g.png", 0, mode="L")
    rgb = write_image(tmp_path / "c.png", 1, mode="RGB")
    rgba = write_image(tmp_path / "a.png", 1, mode="RGBA")
    palette = write_image(tmp_path / "p.png", 0, mode="P")
    assert choose_channels(["L", "L", "I;16"]) == 1
    assert choose_channels(["L", "RGB"]) == 3
    assert choose_channels(["P"]) == 3
    for path in (gray, rgb, rgba, palette):
        assert decode_image(path, 3).shape == (12, 12, 3)
        assert decode_image(path, 1).shape == (12, 12, 1)
    # the grayscale file as RGB repeats its one channel
    as_rgb = decode_image(gray, 3)
    assert (as_rgb[..., 0] == as_rgb[..., 2]).all() and as_rgb.max() == 230
    # 16-bit grayscale is scaled from 0-65535 to 0-255, not clipped at 255
    wide = np.full((4, 4), 1000, dtype=np.uint16)
    wide[0, 0] = 65535
    Image.fromarray(wide).save(tmp_path / "wide.png")
    decoded = decode_image(tmp_path / "wide.png", 1)
    assert decoded[0, 0, 0] == 255 and decoded[1, 1, 0] == round(1000 / 257)


def transforms(augment: bool, size: int = 16) -> ImageTransforms:
    return ImageTransforms(size=size, channels=1, mean=(0.5,), std=(0.25,),
                           augmentation=Augmentation(random_resized_crop=augment,
                                                     horizontal_flip=augment))


def test_transforms_shapes_determinism_and_augmentation_only_in_training(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train", per_class=4)
    scanned = scan_images(list_images(root))
    labels = np.array([0 if name == "left" else 1 for name in scanned.labels])
    resized = decode_resized(scanned.paths[0], 1, 16)
    assert resized.shape == (1, 16, 16) and resized.dtype == torch.uint8

    evaluation = ImageBatches(scanned.paths, labels, transforms=transforms(True), batch_size=3,
                              shuffle=False)
    first = evaluation.collate(evaluation.plan(0)[0])
    assert first["pixel_values"].shape == (3, 1, 16, 16)
    assert first["pixel_values"].dtype == torch.float32
    assert first["labels"].tolist() == labels[:3].tolist()
    again = evaluation.collate(evaluation.plan(3)[0])
    assert torch.equal(first["pixel_values"], again["pixel_values"])  # no augmentation
    plain = transforms(False).normalise(resized)
    assert torch.equal(first["pixel_values"][0], plain)

    training = ImageBatches(scanned.paths, labels, transforms=transforms(True), batch_size=8,
                            shuffle=True, seed=3)
    batch = list(range(8))
    training.plan(0)
    epoch0 = training.collate(batch)["pixel_values"]
    torch.manual_seed(123)  # the global generator does not decide the augmentation
    assert torch.equal(epoch0, training.collate(batch)["pixel_values"])
    training.plan(1)
    epoch1 = training.collate(batch)["pixel_values"]
    assert not torch.equal(epoch0, epoch1)
    unaugmented = torch.stack([plain if i == 0 else transforms(False).normalise(
        decode_resized(scanned.paths[i], 1, 16)) for i in batch])
    assert not torch.equal(epoch0, unaugmented)


def test_decoded_cache_and_workers_give_the_same_batches(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train", per_class=5)
    scanned = scan_images(list_images(root))
    labels = np.arange(len(scanned)) % 2
    decoded = torch.stack([decode_resized(p, 1, 16) for p in scanned.paths]).numpy()
    kwargs = {"transforms": transforms(True), "batch_size": 4, "shuffle": True, "seed": 1}
    sources = [ImageBatches(scanned.paths, labels, **kwargs),
               ImageBatches(scanned.paths, labels, decoded=decoded, **kwargs),
               ImageBatches(scanned.paths, labels, num_workers=2, **kwargs)]
    for epoch in (0, 1):
        results = []
        for source in sources:
            plan = source.plan(epoch)
            results.append([source.collate(b)["pixel_values"] for b in plan[1:]])  # a resume
        for other in results[1:]:
            assert all(torch.equal(a, b) for a, b in zip(results[0], other, strict=True))
    sources[2].close()


def test_channel_stats() -> None:
    images = [torch.full((1, 2, 2), 0, dtype=torch.uint8), torch.full((1, 2, 2), 255,
                                                                      dtype=torch.uint8)]
    mean, std = channel_stats(images, 1)
    assert mean == (0.5,) and std == (0.5,)
    assert channel_stats([torch.zeros(3, 2, 2, dtype=torch.uint8)], 3)[1] == (1.0, 1.0, 1.0)


def test_unknown_timm_name_lists_close_names() -> None:
    assert resolve_image_model("resnet18") == "resnet18"
    assert resolve_image_model("small-cnn") == "small-cnn"
    with pytest.raises(ConfigError, match=r"model.name: 'resnet81' is not a timm model .*"
                                          r"closest names: resnet18"):
        resolve_image_model("resnet81")


@pytest.mark.parametrize(("name", "channels", "size"), [("small-cnn", 1, 8),
                                                        ("small-cnn", 3, 32),
                                                        ("resnet18", 3, 32)])
def test_models_map_pixels_to_logits_and_reload(tmp_path: Path, name: str, channels: int,
                                                size: int) -> None:
    model = build_image_classifier(name=name, num_labels=3, channels=channels, image_size=size)
    model.eval()
    pixels = torch.randn(2, channels, size, size)
    logits = model(pixel_values=pixels)
    assert logits.shape == (2, 3)
    spec = transforms(False, size).as_dict() | {"channels": channels}
    save_image_classifier(model, tmp_path / "model", labels=["a", "b", "c"], transforms=spec)
    loaded, meta = load_image_classifier(tmp_path / "model")
    assert meta["labels"] == ["a", "b", "c"]
    assert ImageTransforms.from_dict(meta["transforms"]).size == size
    assert torch.allclose(loaded(pixel_values=pixels), logits, atol=1e-5)


def test_pretrained_small_cnn_and_missing_weights_file_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="has no pretrained weights"):
        build_image_classifier(name="small-cnn", num_labels=2, channels=1, image_size=8,
                               pretrained=True)
    with pytest.raises(ConfigError, match="does not exist"):
        build_image_classifier(name="resnet18", num_labels=2, channels=3, image_size=32,
                               pretrained=True, weights_file=str(tmp_path / "none.pth"))


def test_pretrained_from_a_local_weights_file(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    source = build_image_classifier(name="resnet18", num_labels=5, channels=3, image_size=32)
    weights = {k: v.contiguous() for k, v in source.network.state_dict().items()}
    save_file(weights, str(tmp_path / "resnet18.safetensors"))
    model = build_image_classifier(name="resnet18", num_labels=2, channels=1, image_size=32,
                                   pretrained=True,
                                   weights_file=str(tmp_path / "resnet18.safetensors"))
    # a body layer comes from the file; the first convolution is adapted to 1 channel
    assert torch.equal(model.network.layer1[0].conv1.weight,
                       source.network.layer1[0].conv1.weight)
    assert model.network.conv1.weight.shape[1] == 1
    assert model.network.fc.out_features == 2


def test_channels_last_gives_the_same_logits() -> None:
    """What the task does on a CUDA GPU (``_channels_last_wanted``), checked on CPU."""
    torch.manual_seed(0)
    model = build_image_classifier(name="resnet18", num_labels=4, channels=3, image_size=32)
    model.eval()
    pixels = torch.randn(2, 3, 32, 32)
    expected = model(pixel_values=pixels)
    model = model.to(memory_format=torch.channels_last)
    model.channels_last = True
    assert model.network.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(model(pixel_values=pixels), expected, atol=1e-5)

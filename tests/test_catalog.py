"""The hardware catalog: shipped coverage, provenance of every number, user overrides, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from entrena.errors import ConfigError
from entrena.hardware.catalog import CATALOG_FILE, closest_names, load_catalog

ROOT = Path(__file__).resolve().parents[1]

REQUIRED_ACCELERATORS = ["cpu", "K80", "P100", "V100-16GB", "T4", "A10G", "L4", "A100-40GB",
                         "A100-80GB", "H100", "H200", "RTX-3070", "RTX-3080", "RTX-3090",
                         "RTX-4090", "TPU-v2", "TPU-v3", "TPU-v4", "TPU-v5e"]
REQUIRED_OFFERS = ["aws-p3.2xlarge", "aws-g4dn.xlarge", "aws-g5.xlarge", "aws-p4d.24xlarge",
                   "aws-p5.48xlarge", "gcp-a2-highgpu-1g", "gcp-a3-highgpu-1g",
                   "gcp-tpu-v4-8", "gcp-tpu-v5litepod-1", "azure-NC24ads_A100_v4",
                   "azure-ND96isr_H100_v5", "colab-t4", "paperspace-h100"]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my-catalog.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_catalog_covers_the_issue_list():
    catalog = load_catalog(env={})
    assert set(REQUIRED_ACCELERATORS) <= set(catalog.accelerators)
    assert set(REQUIRED_OFFERS) <= set(catalog.offers)
    providers = {offer.provider for offer in catalog.offers.values()}
    assert {"aws", "gcp", "azure", "colab", "paperspace"} <= providers
    assert catalog.offers["aws-p4d.24xlarge"].count == 8
    assert catalog.offers["aws-p4d.24xlarge"].accelerator.name == "A100-40GB"
    h100 = catalog.accelerators["H100"]
    assert h100.memory_bytes == 80 * 2**30 and h100.peak_flops["bf16"] == pytest.approx(989.4e12)
    assert catalog.accelerators["T4"].bf16 is False and "bf16" not in \
        catalog.accelerators["T4"].peak_flops


def test_every_shipped_number_names_a_source_with_a_citation_and_a_date():
    raw = yaml.safe_load(CATALOG_FILE.read_text())
    sources = raw["sources"]
    for name, source in sources.items():
        assert source.get("citation") and source.get("date"), name

    def walk(node, key):
        if isinstance(node, dict) and "value" in node:
            assert node["value"] is None or node.get("source") in sources, key
            return
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{k}")
        elif isinstance(node, int | float) and not isinstance(node, bool) \
                and not key.endswith(".count"):
            pytest.fail(f"{key}: a bare number without a source")

    for section in ("accelerators", "offers", "efficiency"):
        walk(raw[section], section)


def test_the_catalog_ships_as_package_data():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"hardware/catalog.yaml"' in text


def test_device_names_map_to_catalog_entries():
    catalog = load_catalog(env={})
    assert catalog.accelerator_for_device("NVIDIA H100 80GB HBM3").name == "H100"
    assert catalog.accelerator_for_device("NVIDIA H200").name == "H200"
    assert catalog.accelerator_for_device("Tesla T4").name == "T4"
    assert catalog.accelerator_for_device("NVIDIA A100-SXM4-80GB").name == "A100-80GB"
    assert catalog.accelerator_for_device("Some Unknown GPU") is None


def test_names_and_aliases_are_found_case_insensitively():
    catalog = load_catalog(env={})
    assert catalog.find("h100").name == "H100"
    assert catalog.find("A100").name == "A100-40GB"  # alias
    assert catalog.find("AWS-P3.2XLARGE").name == "aws-p3.2xlarge"
    assert catalog.find("nope") is None
    assert closest_names("p3.2xlarge", catalog.names()) == ["aws-p3.2xlarge"]
    assert closest_names("rtx4090", catalog.names()) == ["RTX-4090"]


def test_a_user_file_overrides_fields_and_adds_entries(tmp_path):
    path = write(tmp_path, """
accelerators:
  MyGPU:
    kind: gpu
    memory_gib: 12
    peak_tflops: {fp32: 10, bf16: 40}
    bf16: true
offers:
  aws-p3.2xlarge:
    usd_per_hour: 2.5
  home-box:
    provider: home
    accelerator: MyGPU
    count: 1
    usd_per_hour: 0.05
local_usd_per_hour: 0.02
""")
    catalog = load_catalog(path, env={})
    p3 = catalog.offers["aws-p3.2xlarge"]
    assert p3.usd_per_hour == 2.5 and p3.usd_per_hour_spot == 0.918  # spot kept
    assert p3.figures["usd_per_hour"].source == f"user catalog {path}"
    home = catalog.offers["home-box"]
    assert home.accelerator.memory_bytes == 12 * 2**30
    assert home.accelerator.peak_flops["bf16"] == 40e12
    assert catalog.local_usd_per_hour.value == 0.02
    assert catalog.files[-1] == str(path)


def test_the_environment_variable_names_the_user_file(tmp_path):
    path = write(tmp_path, "offers:\n  aws-g5.xlarge:\n    usd_per_hour: 9.0\n")
    catalog = load_catalog(env={"ENTRENA_CATALOG": str(path)})
    assert catalog.offers["aws-g5.xlarge"].usd_per_hour == 9.0


def test_missing_and_negative_numbers_are_clear_errors_naming_file_and_key(tmp_path):
    path = write(tmp_path, """
accelerators:
  H100:
    memory_gib:
  MyGPU:
    kind: gpu
    peak_tflops: {fp32: -3}
offers:
  aws-p3.2xlarge:
    usd_per_hour: -1
  my-box:
    provider: home
    accelerator: RTX-409
    count: 1
""")
    with pytest.raises(ConfigError) as info:
        load_catalog(path, env={})
    message = str(info.value)
    assert f"{path}: accelerators.H100.memory_gib: is missing a number" in message
    assert f"{path}: accelerators.MyGPU.peak_tflops.fp32: must not be negative, got -3" in message
    assert f"{path}: accelerators.MyGPU.memory_gib: is null or missing" in message
    assert f"{path}: offers.aws-p3.2xlarge.usd_per_hour: must not be negative, got -1" in message
    assert "offers.my-box.accelerator: unknown accelerator 'RTX-409'; did you mean 'RTX-4090'?" \
        in message
    assert "offers.my-box.usd_per_hour: is missing" in message


def test_unknown_keys_and_bad_files_are_errors(tmp_path):
    path = write(tmp_path, "offers:\n  aws-g5.xlarge:\n    spot: 0.1\nprices: {}\n")
    with pytest.raises(ConfigError) as info:
        load_catalog(path, env={})
    assert "offers.aws-g5.xlarge.spot: unknown key; did you mean 'usd_per_hour_spot'?" \
        in str(info.value)
    assert "(top level).prices: unknown key" in str(info.value)
    with pytest.raises(ConfigError, match="cannot read the catalog file"):
        load_catalog(tmp_path / "absent.yaml", env={})
    bad = write(tmp_path, "offers: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_catalog(bad, env={})
    with pytest.raises(ConfigError, match="efficiency.gpu_mixed: is a fraction"):
        load_catalog(write(tmp_path, "efficiency:\n  gpu_mixed: 3\n"), env={})


def test_the_documented_catalog_example_is_valid(tmp_path):
    text = (ROOT / "docs" / "reference" / "catalog.md").read_text()
    after = text[text.index("## Your own catalog file"):]
    block = after[after.index("```yaml\n") + 8:]
    block = block[:block.index("```")]
    catalog = load_catalog(write(tmp_path, block), env={})
    assert catalog.offers["lab-box"].count == 2
    assert catalog.offers["aws-g5.xlarge"].usd_per_hour == 0.95
    assert catalog.local_usd_per_hour.value == 0.05

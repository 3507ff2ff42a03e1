"""The GPU presets' generation, memory kind and interconnect, and the datasheet figures behind the
newer presets. The expected numbers are worked out here from the vendors' wording (bidirectional
link figures halved, starred sparse figures halved, rack totals divided by the GPUs in the rack),
not copied from kvcalc.gpus."""

from __future__ import annotations

import pytest

from kvcalc.errors import UsageError
from kvcalc.gpus import GPU, GPUS, PEAKS, Peaks, find_gpu

G = 10**9
T = 10**12
P = 10**15
MIB = 2**20

ARCHS = {"ampere", "ada", "hopper", "blackwell", "cdna3", "apple"}
MEMORY_KINDS = {"hbm", "gddr", "unified"}
LINK_KINDS = {"nvlink", "pcie", "infinity-fabric", "none"}

CARDS = [g for g in GPUS if g.unified_bytes is None]
MACS = [g for g in GPUS if g.unified_bytes is not None]
WITH_PEAKS = [g for g in GPUS if g.peaks is not None]


def of(gpu: GPU) -> Peaks:
    assert gpu.peaks is not None, gpu.name
    return gpu.peaks


def peaks(name: str) -> Peaks:
    return of(find_gpu(name))


@pytest.mark.parametrize("gpu", WITH_PEAKS, ids=lambda g: g.name)
def test_every_preset_with_peaks_names_its_generation_and_memory(gpu: GPU) -> None:
    assert of(gpu).arch in ARCHS
    assert of(gpu).memory_kind in MEMORY_KINDS


def test_every_card_has_peaks() -> None:
    assert all(g.peaks is not None for g in CARDS), [g.name for g in CARDS if g.peaks is None]
    assert set(PEAKS) == {g.name for g in CARDS}


@pytest.mark.parametrize("gpu", CARDS, ids=lambda g: g.name)
def test_every_card_has_a_link(gpu: GPU) -> None:
    link = of(gpu).link
    assert link is not None, gpu.name
    assert link.kind in LINK_KINDS - {"none"}
    assert link.bandwidth > 0
    assert link.label and link.source
    # No card's peer link comes near its own memory bandwidth.
    assert link.bandwidth < of(gpu).bandwidth


@pytest.mark.parametrize("gpu", MACS, ids=lambda g: g.name)
def test_macs_are_apple_unified_with_no_peer_link(gpu: GPU) -> None:
    assert (of(gpu).arch, of(gpu).memory_kind, of(gpu).link) == ("apple", "unified", None)


@pytest.mark.parametrize("gpu", WITH_PEAKS, ids=lambda g: g.name)
def test_dense_peaks_rise_as_precision_falls(gpu: GPU) -> None:
    p = of(gpu)
    assert p.bf16 > 0 and p.int8 > 0
    if p.fp8 is not None:
        assert p.bf16 <= p.fp8
    if p.fp4 is not None:
        assert p.fp8 is not None and p.fp8 <= p.fp4


@pytest.mark.parametrize("gpu", CARDS, ids=lambda g: g.name)
def test_runtime_memory_is_within_what_nvidia_smi_shows(gpu: GPU) -> None:
    assert 0.95 * gpu.smi_mib * MIB < gpu.runtime_bytes <= gpu.smi_mib * MIB


@pytest.mark.parametrize(
    ("name", "kind", "datasheet_bidirectional"),
    [
        ("h100-sxm", "nvlink", 900 * G),  # H100 datasheet, SXM: "NVLink: 900GB/s"
        ("h100-pcie", "pcie", 128 * G),  # H100 datasheet, PCIe: "PCIe Gen5: 128GB/s" (NVLink bridge optional)
        ("h200", "nvlink", 900 * G),  # H200 datasheet, SXM: "NVLink: 900GB/s"
        ("h800", "nvlink", 400 * G),  # H800 SXM: "NVLink: 400GB/s"
        ("a100-80gb", "nvlink", 600 * G),  # A100 datasheet, SXM: "NVLink: 600GB/s"
        ("a100-40gb", "nvlink", 600 * G),
        ("l4", "pcie", 64 * G),  # L4 datasheet: "PCIe Gen4 x16 64GB/s"
        ("l40", "pcie", 64 * G),  # L40 datasheet: "PCIe Gen4 x16: 64GB/s bidirectional"
        ("l40s", "pcie", 64 * G),
        ("rtx-4090", "pcie", 64 * G),  # PCIe 4.0 x16, no NVLink
        ("rtx-6000-ada", "pcie", 64 * G),  # PCIe 4.0 x16, no NVLink
        ("rtx-5090", "pcie", 128 * G),  # PCIe 5.0 x16, no NVLink
        ("b200", "nvlink", 1_800 * G),  # HGX B200: "GPU-to-GPU bandwidth 1.8TB/s"
        ("b300", "nvlink", 1_800 * G),  # HGX B300: "GPU-to-GPU bandwidth 1.8TB/s"
        ("gb200", "nvlink", 1_800 * G),  # GB200 NVL72: 1.8 TB/s a GPU
        ("mi300x", "infinity-fabric", 7 * 128 * G),  # 7 links x 128 GB/s = 896 GB/s aggregate
        ("mi325x", "infinity-fabric", 7 * 128 * G),
    ],
)
def test_links_are_the_datasheet_figure_one_way(name: str, kind: str, datasheet_bidirectional: int) -> None:
    link = peaks(name).link
    assert link is not None
    assert link.kind == kind
    assert link.bandwidth * 2 == datasheet_bidirectional


def test_h800_is_an_h100_sxm_with_a_cut_nvlink() -> None:
    h800, h100 = peaks("h800"), peaks("h100-sxm")
    assert h800.link is not None and h800.link.bandwidth == 200 * G  # 400 GB/s bidirectional
    assert h800.bandwidth == 3_350 * G  # 3.35 TB/s HBM3
    # BF16 1,979* / FP8 3,958* TFLOPS with sparsity, as the H100 SXM: the Hopper whitepaper's dense 989.4 / 1,978.9.
    assert (h800.bf16, h800.fp8, h800.fp4) == (989_400 * G, 1_978_900 * G, None)
    assert (h800.bf16, h800.fp8, h800.int8) == (h100.bf16, h100.fp8, h100.int8)
    assert find_gpu("h800-sxm").runtime_bytes == find_gpu("h100-sxm").runtime_bytes


def test_b300_follows_the_hgx_b300_tables() -> None:
    b300 = peaks("b300")
    # Blackwell Ultra datasheet, HGX B300 column: "FP4 Tensor Core 18 | 14 PFLOPS" (sparse | dense).
    assert b300.fp4 == 14 * P
    # The HGX page's 8-GPU figure, "144 PFLOPS | 108 PFLOPS", gives 13.5 dense a GPU: the larger is kept.
    assert b300.fp4 >= 108 * P // 8
    # FP8/FP6 72 PFLOPS and FP16/BF16 36 PFLOPS for 8 GPUs, with sparsity: dense is half.
    assert b300.fp8 == 72 * P // 8 // 2
    assert b300.bf16 == 36 * P // 8 // 2
    assert b300.bandwidth == 8 * T  # 288 GB HBM3E at 8 TB/s
    assert find_gpu("b300-288gb").smi_mib == 275_040  # nvidia-smi 'NVIDIA B300 SXM6 AC'


def test_gb200_is_the_nvl72_rack_divided_by_72() -> None:
    gb200 = peaks("gb200")
    # GB200 NVL72: FP4 1,440 PFLOPS, FP8/FP6 720, INT8 720 POPS, FP16/BF16 360, all with sparsity.
    assert gb200.fp4 == 1_440 * P // 72 // 2 == 10 * P
    assert gb200.fp8 == 720 * P // 72 // 2
    assert gb200.int8 == 720 * P // 72 // 2
    assert gb200.bf16 == 360 * P // 72 // 2
    assert gb200.bandwidth == 576 * T // 72  # "13.4 TB HBM3e | 576 TB/s"
    assert gb200.link is not None
    assert gb200.link.bandwidth * 2 * 72 == pytest.approx(130 * T, rel=0.01)  # "NVLink bandwidth 130TB/s"
    assert find_gpu("gb200-nvl72").smi_mib == 189_471
    # "13.4 TB" / 72 = 186 "GB" a GPU: nvidia-smi's 185.0 GiB is that figure (NVIDIA's rack total counts GiB).
    assert find_gpu("gb200").smi_mib / 1024 == pytest.approx(13.4e12 / 72 / 1e9, rel=0.01)


def test_ada_and_blackwell_cards() -> None:
    l40 = peaks("l40")  # datasheet: BF16 181.05 | 362.1*, FP8 362 | 724*, INT8 362 | 724*
    assert (l40.bf16, l40.fp8, l40.int8, l40.bandwidth) == (362_100 * G // 2, 724 * T // 2, 724 * T // 2, 864 * G)
    ada = peaks("rtx-6000-ada")  # datasheet: "Tensor Performance 1,457.0 TFLOPS" (FP8, sparse), 960 GB/s
    assert ada.fp8 == 1_457 * T // 2 and ada.bf16 == ada.fp8 // 2 and ada.bandwidth == 960 * G
    rtx5090 = peaks("rtx-5090")  # "3,352 AI TOPS" (FP4, sparse), 1,792 GB/s GDDR7
    assert rtx5090.fp4 == 3_352 * T // 2 and rtx5090.bandwidth == 1_792 * G
    assert (rtx5090.arch, rtx5090.memory_kind) == ("blackwell", "gddr")


def test_mi325x_is_an_mi300x_with_more_hbm() -> None:
    mi325x = peaks("mi325x")
    assert mi325x.bandwidth == 6 * T  # 6 TB/s HBM3E
    assert (mi325x.bf16, mi325x.fp8) == (1_307_400 * G, 2_614_900 * G)  # AMD: dense, no sparsity
    assert mi325x.link is not None and mi325x.link.bandwidth == 7 * 64 * G
    # rocminfo: a 268,419,072 KB pool, 16 MiB short of 256 GiB.
    assert find_gpu("mi325").runtime_bytes == 256 * 2**30 - 16 * MIB


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("h800-sxm", "h800"),
        ("rtx6000-ada", "rtx-6000-ada"),
        ("6000-ada", "rtx-6000-ada"),
        ("5090", "rtx-5090"),
        ("rtx5090", "rtx-5090"),
        ("RTX 5090", "rtx-5090"),
        ("mi325", "mi325x"),
        ("b300-288gb", "b300"),
        ("gb200-nvl72", "gb200"),
        ("L40", "l40"),
    ],
)
def test_aliases(alias: str, name: str) -> None:
    assert find_gpu(alias).name == name


@pytest.mark.parametrize("name", ["a100", "A100", "a100-sxm4", "a100-pcie"])
def test_a_name_sold_in_two_memory_sizes_is_refused_with_both(name: str) -> None:
    """The A100 comes with 40 GB and 80 GB (NVIDIA A100 datasheet): a bare name picks neither."""
    with pytest.raises(UsageError, match=r"choose a100-40gb or a100-80gb$") as raised:
        find_gpu(name)
    assert raised.value.params == ("gpu",)
    assert find_gpu("a100-80").name == "a100-80gb" and find_gpu("a100-40").name == "a100-40gb"


def test_the_cli_refuses_an_ambiguous_gpu_in_one_line(run_cli) -> None:
    for command in (["fit", "llama-3.1-8b"], ["speed", "llama-3.1-8b"]):
        result = run_cli(*command, "--gpu", "a100")
        assert result.exit_code == 2 and result.stdout == "", result
        assert result.stderr.strip().splitlines() == [
            "kvcalc: error: --gpu 'a100' comes in several memory sizes: choose a100-40gb or a100-80gb"
        ]


def test_gpu_suggestions_name_each_gpu_once() -> None:
    """'4080' is close to 4090 and rtx4090, both the rtx-4090: it is named once, by its name."""
    with pytest.raises(UsageError) as raised:
        find_gpu("4080")
    names = str(raised.value).split("did you mean ", 1)[1].split("?")[0].split(", ")
    assert len({find_gpu(n).name for n in names}) == len(names) and all(find_gpu(n).name == n for n in names)


# --- gpus.yaml: the presets are data, validated when first loaded ----------------------------------


def _load_with(monkeypatch: pytest.MonkeyPatch, change) -> None:  # type: ignore[no-untyped-def]
    """Load the presets from a copy of gpus.yaml that ``change`` edits."""
    import copy

    from kvcalc import gpus

    data = copy.deepcopy(gpus._read())
    change(data)
    monkeypatch.setattr(gpus, "_read", lambda: data)
    monkeypatch.setattr(gpus, "_LOADED", [])
    gpus._data()


def _card(data: dict, name: str) -> dict:  # type: ignore[type-arg]
    return next(card for card in data["cards"] if card["name"] == name)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: _card(d, "h200").update(tdp=700), "cards[2] (h200): unknown field 'tdp'"),
        (lambda d: _card(d, "h200").pop("smi_mib"), "cards[2] (h200): missing field 'smi_mib'"),
        (lambda d: _card(d, "h200")["peaks"].update(bf16="989T"), "cards[2] (h200) peaks: field 'bf16' must be an int"),
        (lambda d: _card(d, "h200")["peaks"].update(arch="volta"), "arch 'volta' is not one of"),
        (lambda d: _card(d, "h200").update(runtime_bytes=1), "give one of 'runtime_bytes' and 'runtime_mib'"),
        (lambda d: _card(d, "l4").update(runtime_bytes=0), "cards[6] (l4): field 'runtime_bytes' must be positive"),
        (lambda d: _card(d, "h200").update(aliases=["h100"]), "name 'h100' is also h100-sxm's"),
        (lambda d: d["macs"]["chips"][0].pop("bandwidth_gbs"), "macs.chips[0]: missing field 'bandwidth_gbs'"),
        (lambda d: d.update(tpus=[]), "the file: unknown field 'tpus'"),
    ],
)
def test_a_bad_preset_is_one_line_naming_the_field(monkeypatch: pytest.MonkeyPatch, change, message: str) -> None:  # type: ignore[no-untyped-def]
    from kvcalc.errors import PresetError

    with pytest.raises(PresetError) as caught:
        _load_with(monkeypatch, change)
    text = str(caught.value)
    assert text.startswith("GPU presets (gpus.yaml): ") and message in text and "\n" not in text, text


def test_the_presets_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvcalc import gpus

    calls = []
    real = gpus._read
    monkeypatch.setattr(gpus, "_read", lambda: calls.append(1) or real())
    monkeypatch.setattr(gpus, "_LOADED", [])
    assert gpus.find_gpu("h100") is gpus.find_gpu("h100-sxm")
    assert len(gpus.GPUS) > 40 and calls == [1]


def test_memory_from_mib_is_mib_times_2_to_the_20() -> None:
    # gpus.yaml gives h200 as runtime_mib 143,156 (torch total_memory=143156MB): x 1,048,576 =
    # 143,156,000,000 + 143,156 x 48,576 (6,953,945,856) = 150,109,945,856.
    assert find_gpu("h200").runtime_bytes == 143_156 * 1_048_576 == 150_109_945_856


# Each preset's maker, from its generation (gpus.yaml's peaks.arch; every Mac is Apple's): the
# vendors' own naming of the architectures (NVIDIA Ampere, Ada, Hopper, Blackwell; AMD CDNA 3).
MAKERS = {"ampere": "nvidia", "ada": "nvidia", "hopper": "nvidia", "blackwell": "nvidia", "cdna3": "amd",
          "apple": "apple"}  # fmt: skip


@pytest.mark.parametrize("gpu", WITH_PEAKS, ids=lambda g: g.name)
def test_every_preset_knows_its_vendor_and_platform(gpu: GPU) -> None:
    assert gpu.vendor == MAKERS[of(gpu).arch]
    assert gpu.platform == {"nvidia": "cuda", "amd": "rocm", "apple": "metal"}[gpu.vendor]


@pytest.mark.parametrize(("name", "vendor", "platform"), [
    ("h100-sxm", "nvidia", "cuda"), ("rtx-4090", "nvidia", "cuda"), ("mi300x", "amd", "rocm"),
    ("mi325x", "amd", "rocm"), ("m4-max-128gb", "apple", "metal"),
])  # fmt: skip
def test_vendor_of_named_presets(name: str, vendor: str, platform: str) -> None:
    found = find_gpu(name)
    assert (found.vendor, found.platform) == (vendor, platform)

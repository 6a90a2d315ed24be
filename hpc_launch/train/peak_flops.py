"""Peak dense FLOP/s per device, for MFU (model FLOPs utilisation). Standard library only.

One row per product: the words its name must contain (as torch reports it, e.g. "NVIDIA H100 80GB
HBM3"), the dense (no structured sparsity) peak in TFLOP/s for bf16/fp16 tensor math and for fp32
(plain fp32, which torch's matmuls use unless TF32 is allowed), and where the figure comes from.
Vendors print sparse figures on the same sheets: the dense one is half of those. A device the
table lacks (a CPU, a GPU not listed) has no peak: its MFU is said as unknown, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass(frozen=True)
class Peak:
    words: Tuple[str, ...]  # every word must be in the device name (case-insensitive)
    bf16: float  # TFLOP/s, dense; fp16 is the same on every listed device
    fp32: Optional[float]  # TFLOP/s, None where no sheet gives it
    source: str
    inferred: bool = False  # derived from a sheet's figure (said how), not printed on it


# Most specific first: "GH200" before "H200", "H100 PCIe" before "H100".
PEAKS = (
    Peak(("gh200",), 989.0, 67.0, "NVIDIA GH200 Grace Hopper Superchip datasheet: H100-class GPU, BF16 1,979 sparse"),
    Peak(("h200", "nvl"), 835.0, 60.0, "NVIDIA H200 datasheet, H200 NVL column: BF16 1,671 TFLOPS with sparsity"),
    Peak(("h200",), 989.0, 67.0, "NVIDIA H200 datasheet, H200 SXM column: BF16 1,979 TFLOPS with sparsity"),
    Peak(("h100", "pcie"), 756.0, 51.0, "NVIDIA H100 datasheet, H100 PCIe column: BF16 1,513 TFLOPS with sparsity"),
    Peak(("h100", "nvl"), 835.0, 60.0, "NVIDIA H100 datasheet, H100 NVL column: BF16 1,671 TFLOPS with sparsity"),
    Peak(("h100",), 989.0, 67.0, "NVIDIA H100 datasheet, H100 SXM column: BF16 1,979 TFLOPS with sparsity"),
    Peak(("a100",), 312.0, 19.5, "NVIDIA A100 datasheet: BF16 312 TFLOPS (624 with sparsity), FP32 19.5"),
    Peak(("l40s",), 362.0, 91.6, "NVIDIA L40S datasheet: BF16 362.05 TFLOPS (733 with sparsity), FP32 91.6"),
    # AMD: torch sees each GCD of an MI250X as its own device; the sheet's 383 TFLOPS is the package's two.
    Peak(
        ("mi250x",), 191.5, 23.95, "AMD Instinct MI250X datasheet: 383 TFLOPS BF16 per package (2 GCDs), halved", True
    ),
    Peak(("mi300x",), 1307.4, 163.4, "AMD Instinct MI300X datasheet: 1,307.4 TFLOPS BF16 dense, FP32 vector 163.4"),
    # Intel: with ZE_FLAT_DEVICE_HIERARCHY=FLAT (Aurora's default) each of the card's 2 tiles is a device.
    Peak(
        ("max 1550",),
        416.0,
        None,
        "Intel Data Center GPU Max 1550 product brief: 832 TFLOPS BF16 per card (2 tiles), halved per tile",
        True,
    ),
)


def peak_for(device_name: str) -> Optional[Peak]:
    name = device_name.lower()
    return next((p for p in PEAKS if all(w in name for w in p.words)), None)


def peak_tflops(device_name: str, precision: str) -> Optional[float]:
    """Dense peak TFLOP/s of one device at `precision` (bf16 | fp16 | fp32), None where unknown."""
    peak = peak_for(device_name)
    if peak is None:
        return None
    return peak.fp32 if precision == "fp32" else peak.bf16

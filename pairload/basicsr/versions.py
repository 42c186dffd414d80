"""torchvision that does not import beside the installed torch: a BasicSR-family repository imports it while
loading (Retinexformer's datasets do), so a torchvision built for another torch, or for CUDA beside a CPU torch, ends
the command before any of its own checks. This module recognises that failure and says which pair to install."""

from __future__ import annotations

import importlib.util
import re
from importlib import metadata
from pathlib import Path

PYTORCH_INDEX = "https://download.pytorch.org/whl"  # + "/cpu": PyTorch's CPU builds; "/cu126": CUDA 12.6's, …
_TORCH_PIN = re.compile(r"^torch\s*\(?\s*==\s*([^\s,;)]+)")


def torchvision_import_failed(exc: BaseException) -> bool:
    """Whether `exc` ended an import of torchvision: raised while one of torchvision's modules ran its top level
    (`operator torchvision::nms does not exist`, an undefined symbol in torchvision/_C.so, …), or torchvision not
    installed at all."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torchvision":
        return True
    try:
        spec = importlib.util.find_spec("torchvision")  # where it lies, found without running it
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin:
        return False
    package = Path(spec.origin).parent
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "<module>" and Path(code.co_filename).is_relative_to(package):
            return True
        tb = tb.tb_next
    return False


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _torch_pin() -> str | None:
    """The torch version the installed torchvision requires (`Requires-Dist: torch (==2.13.0)`), if it says."""
    try:
        requires = metadata.requires("torchvision") or []
    except metadata.PackageNotFoundError:
        return None
    pins = [m.group(1) for m in map(_TORCH_PIN.match, requires) if m]
    return pins[0] if pins else None


def torchvision_fix(exc: BaseException) -> str:
    """What went wrong and the command that installs the torchvision made for the installed torch, from the index
    that torch came from (its local label: 2.13.0+cpu comes from .../whl/cpu; none: PyPI)."""
    torch = _version("torch")
    what = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    if torch is None:
        return f"torch is not installed ({what}); install torch and the torchvision made for it (docs/basicsr.md)"
    label = torch.partition("+")[2]
    install = f"pip install 'torch=={torch}' torchvision" + (f" --index-url {PYTORCH_INDEX}/{label}" if label else "")
    where = 'docs/basicsr.md, "CPU or a pinned torch"'
    vision = _version("torchvision")
    if vision is None:
        return f"it is not installed ({what}); install the build made for torch {torch}: {install} ({where})"
    pin = _torch_pin()
    made = f" (made for torch=={pin})" if pin else ""
    return (f"torchvision {vision}{made} does not import beside torch {torch} ({what}); torchvision must be the "
            f"build made for this torch, from the same index: pip uninstall -y torchvision && {install} ({where})")

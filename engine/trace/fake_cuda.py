"""A fake CUDA device for a CPU-only torch build, as a tiny C++ extension.

Why: on a CPU build, autograd on tensors whose device is ``cuda`` (fake tensors never touch memory, but
they carry a device) aborts ("not linked with support for cuda devices") and ``backward()`` finds no
accelerator. Two registrations fix it: a device guard for ``DeviceType::CUDA`` (the autograd engine
switches devices through it) and CUDA hooks that say CUDA is built and present (``at::hasCUDA()``,
``torch.accelerator``). The hooks are looked up once, during ``import torch``, so the library must be
loaded before torch starts: the worker process is started with ``LD_PRELOAD`` pointing at it
(see ../shared/reference/tracing-notes.md, item 1).

The extension is compiled once with ``torch.utils.cpp_extension.load_inline`` into a cache folder
(``$FINETUNE_FIT_CACHE`` or ``~/.cache/finetune-fit``) and reused; building takes 20-30 s on 2 cores.
Importing this module does not import torch (building does).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

NAME = "finetune_fit_fake_cuda"

SOURCE = r"""
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {

// One device, index 0; streams are all the default stream. Nothing touches memory: fake tensors only.
struct FakeCudaGuard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }
  c10::Device exchangeDevice(c10::Device) const override { return c10::Device(c10::DeviceType::CUDA, 0); }
  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::CUDA, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

}  // namespace

namespace at { namespace cuda { namespace detail {

// Registered under the name the CPU build looks up ("CUDAHooks"): CUDA looks built and present.
struct CUDAHooks final : public at::CUDAHooksInterface {
  explicit CUDAHooks(at::CUDAHooksArgs) {}
  void init() const override {}
  bool hasCUDA() const override { return true; }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  int getNumGPUs() const override { return 1; }
  c10::DeviceIndex current_device() const override { return 0; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex) const override { return 0; }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex) const override { return 0; }
  void deviceSynchronize(c10::DeviceIndex) const override {}
};

REGISTER_CUDA_HOOKS(CUDAHooks);

}}}  // namespace at::cuda::detail

C10_REGISTER_GUARD_IMPL(CUDA, FakeCudaGuard);
"""


def cache_dir() -> Path:
    """Where the compiled extension lives: ``$FINETUNE_FIT_CACHE`` or ``~/.cache/finetune-fit``."""
    root = os.environ.get("FINETUNE_FIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "finetune-fit")
    return Path(root)


def torch_version() -> str:
    """The installed torch's version, read from its metadata (no import: importing torch takes seconds)."""
    from importlib.metadata import version

    return version("torch")


def torch_is_cuda_build() -> bool:
    """Whether the installed torch was built with CUDA, read from ``torch/version.py`` without importing torch."""
    import re

    text = (torch_lib_dir().parent / "version.py").read_text(encoding="utf-8")
    match = re.search(r"^cuda\s*(?::[^=]*)?=\s*(.+)$", text, flags=re.M)
    return bool(match) and match.group(1).strip() not in ("None", "''", '""')


def build_dir() -> Path:
    """Build folder, one per torch version and source (a torch upgrade or a source edit rebuilds)."""
    import hashlib

    v = torch_version()
    tag = hashlib.sha256((v + SOURCE).encode()).hexdigest()[:12]
    return cache_dir() / f"fake_cuda-{v}-{tag}"


def build() -> Path:
    """Compile the extension (if not already) and return the path of the shared library.

    Runs in this process: call it from a process that will not trace (the library registers itself
    when loaded, too late for the hooks of an already started torch).
    """
    folder = build_dir()
    lib = folder / f"{NAME}.so"
    if lib.exists():
        return lib
    from torch.utils.cpp_extension import load_inline

    folder.mkdir(parents=True, exist_ok=True)
    load_inline(name=NAME, cpp_sources=[SOURCE], functions=None, build_directory=str(folder),
                is_python_module=False, extra_cflags=["-O1"], verbose=False)
    return lib


def torch_lib_dir() -> Path:
    """torch's ``lib`` folder (libc10.so, libtorch_cpu.so), found without importing torch."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise ImportError("torch is not installed")
    return Path(spec.origin).parent / "lib"


def main() -> None:
    """``python -m engine.trace.fake_cuda``: build if needed; print the library path and the seconds taken."""
    t0 = time.perf_counter()
    lib = build()
    print(lib)
    print(f"{time.perf_counter() - t0:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""qpu_dot: seed 004's torch extension, built with torch.utils.cpp_extension against the torch
wheel of the same target and linked to QPULib's libqpu (QPU=1, the board's QPUs) or to its
emulator build libqpu-emu (QPU=0, any machine)."""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

qpu = os.environ.get("QPU", "1") == "1"
setup(
    name="qpu_dot",
    version=os.environ.get("VERSION", "1.0"),
    ext_modules=[
        CppExtension(
            "qpu_dot",
            ["dot.cpp"],
            include_dirs=["/usr/local/include/QPULib"],
            library_dirs=["/usr/local/lib", "/usr/local/lib/qpulib"],
            libraries=["qpu"] if qpu else [":libqpu-emu.so"],
            runtime_library_dirs=[] if qpu else ["/usr/local/lib/qpulib"],
            extra_compile_args=["-fpermissive", "-w", "-DQPU_MODE" if qpu else "-DEMULATION_MODE"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)

"""Build of edge_infer (setuptools)."""
import glob
import os
import re
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "edge_infer", "version.py")) as f:
    VERSION = re.search(r'__version__ = "([^"]+)"', f.read()).group(1)

EXTRAS = {
    # tflite: the TFLite flatbuffer schema (reader and builder) for import and export
    "convert": ["onnx>=1.14", "tflite>=2.10", "flatbuffers>=2.0"],
    "vision": ["opencv-python-headless>=4.5", "pillow>=9"],
    "opencl": ["pyopencl>=2022.1"],
    "cuda": ["cupy>=12"],
    "tflite": ["ai-edge-litert>=1.0"],
    "plot": ["matplotlib>=3.5"],
    # sign: Ed25519 signatures of artifacts (keygen, sign, --trust); imported only when used
    "sign": ["cryptography>=3.4"],
}
EXTRAS["dev"] = sorted(set(EXTRAS["convert"] + EXTRAS["vision"] + EXTRAS["plot"] + EXTRAS["sign"] + [
    "onnxruntime>=1.16", "pytest>=7", "pytest-timeout>=2", "pytest-xdist>=3", "hypothesis>=6",
    "scikit-learn>=1.0", "threadpoolctl>=3", "tqdm>=4",
] + EXTRAS["opencl"] + EXTRAS["tflite"]))

NATIVE_DIR = os.path.join("edge_infer", "backends", "cpu", "native")


class OptionalNativeBuild(build_ext):
    """Builds the native kernels (a plain C library loaded with ctypes) when a C compiler
    works; otherwise, or with EDGE_INFER_NO_NATIVE=1, the install goes on without them and
    the numpy kernels serve."""

    def run(self):
        if os.environ.get("EDGE_INFER_NO_NATIVE", "") not in ("", "0"):
            print("edge_infer: EDGE_INFER_NO_NATIVE set; native kernels not built", file=sys.stderr)
            return
        super().run()

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # any compiler or linker failure: fall back to numpy
            print(f"edge_infer: WARNING: native kernels not built ({e}); the numpy kernels "
                  "will be used", file=sys.stderr)

    def get_export_symbols(self, ext):
        return []      # not a Python module: no PyInit_ symbol


#: EDGE_INFER_NATIVE_DEBUG=1: the debug variant, every exported kernel checking its arguments'
#: preconditions (EI_CHECK in src/edge_native.h; aborts naming the condition). Build it apart,
#: e.g. `EDGE_INFER_NATIVE_DEBUG=1 python setup.py build_ext --build-lib DIR`, and load it with
#: EDGE_INFER_NATIVE_LIB=DIR/edge_infer/backends/cpu/native/_edge_native....so
DEBUG_NATIVE = os.environ.get("EDGE_INFER_NATIVE_DEBUG", "") not in ("", "0")

NATIVE = Extension(
    "edge_infer.backends.cpu.native._edge_native",
    sources=sorted(glob.glob(os.path.join(NATIVE_DIR, "src", "*.c"))),
    depends=sorted(glob.glob(os.path.join(NATIVE_DIR, "src", "*.h"))),
    include_dirs=[os.path.join(NATIVE_DIR, "src")],
    define_macros=[("EI_DEBUG_CHECKS", "1")] if DEBUG_NATIVE else [],
    extra_compile_args=["-O1" if DEBUG_NATIVE else "-O3", "-std=gnu11", "-fno-strict-aliasing", "-pthread",
                        "-Wall"],
    extra_link_args=["-pthread"],
)

setup(
    name="edge-infer",
    version=VERSION,
    description="Convert neural networks on a workstation; run them fast and small on edge devices.",
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["edge_infer", "edge_infer.*"]) + ["edge_infer._targets",
                                                                     "edge_infer._calibration"],
    # the top-level targets/ (device profiles) and calibration/ (preprocessing recipes, sample
    # images) folders ship inside the package
    package_dir={"edge_infer._targets": "targets", "edge_infer._calibration": "calibration"},
    package_data={"edge_infer": ["data/*", "data/*/*", "backends/cpu/native/src/*"], "edge_infer._targets": ["*.json"],
                  "edge_infer._calibration": ["*.json", "*.md", "images/*"]},
    include_package_data=True,
    python_requires=">=3.9",
    install_requires=["numpy>=1.23", "psutil>=5.8"],
    extras_require=EXTRAS,
    ext_modules=[NATIVE],
    cmdclass={"build_ext": OptionalNativeBuild},
    entry_points={"console_scripts": ["edge-infer=edge_infer.cli:main"]},
    classifiers=["Programming Language :: Python :: 3"],
    license="Apache-2.0",
)

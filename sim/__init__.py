"""The world: SimPy environment, market, scenarios, recording, replay and the command line."""
import os
import platform
from importlib import metadata

# OpenBLAS threads keep spinning after a BLAS call and collide with numba's retrieval threads on a
# small machine (DESIGN "Speed facts"); the engine pins BLAS to one thread unless told otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Likewise numba's OpenMP threads spin for a while after each parallel kernel (retrieval, slot
# picking); spinning, they keep the recorder's low-priority writer thread off the core the
# mind's Python leaves idle, and its parts pile up until the end of the run. Passive threads
# sleep at once (measured on a 3-day bench run: no drain at the end, against 1 s with spinning).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

#: the packages whose versions a manifest (and `golem-sim --version`) names
VERSION_PACKAGES = ("golem-sim", "numpy", "numba", "simpy", "pyarrow", "polars")


def versions() -> dict[str, str]:
    """Python's and VERSION_PACKAGES' versions, read from the installed metadata (nothing imported)."""
    out = {"python": platform.python_version()}
    for p in VERSION_PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "unknown"
    return out

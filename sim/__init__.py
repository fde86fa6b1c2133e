"""The world: SimPy environment, market, scenarios, recording, replay and the command line."""
import os

# OpenBLAS threads keep spinning after a BLAS call and collide with numba's retrieval threads on a
# small machine (DESIGN "Speed facts"); the engine pins BLAS to one thread unless told otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

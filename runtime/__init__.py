"""Runtimes that execute the IR: the NumPy reference executor, the timing simulator, the CuPy GPU executor."""

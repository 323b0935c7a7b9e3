"""Runtimes that execute the IR: the NumPy reference executor, the timing simulator, the CuPy GPU executor.

- ``runtime.numpy``: :func:`~runtime.numpy.run` (execute on random inputs and check against the
  NumPy reference), :func:`~runtime.numpy.execute` (given inputs), :class:`~runtime.numpy.NumpyExecutor`.
- ``runtime.sim``: :func:`~runtime.sim.simulate`, the alpha-beta timing of an IR on a topology.
- ``runtime.bench``: :func:`~runtime.bench.bench`, over the backend registry of ``runtime.backends``
  (numpy, sim, cupy; light to import, so the command line builds its choices from it).
- ``runtime.executor``: what the executors share; ``runtime.datatypes``: element types and reductions.
- ``runtime.reference``: inputs, expected outputs and the comparison every executor shares.
- ``runtime.program`` / ``runtime.protocol``: the IR as the MSCCL runtime loads it; tiles and FIFOs.
- ``runtime.selection``: whether the runtime selects an IR at a size (its minBytes/maxBytes window,
  per dialect); ``runtime.limits``: the host-memory limit of one execution.
"""

"""The ``xccl`` command line."""

"""Code generation: the chunk DSL, the compiler passes, the IR and its MSCCL XML and JSON forms."""

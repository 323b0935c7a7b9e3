"""A cyclic shift: every rank's input chunk goes to the next rank's output (a custom collective)."""

from codegen import ChunkProgram, chunk, custom_collective


def program(num_ranks=4):
    n = num_ranks
    # the expected result: rank (r + 1) % n's output slot 0 holds rank r's input chunk 0
    shift = custom_collective(n, 1, 1, {((r + 1) % n, 0): (r, 0) for r in range(n)})
    with ChunkProgram("shift", f"ring:{n}", shift) as prog:
        for r in range(n):
            chunk(r, "input", 0).copy((r + 1) % n, "output", 0)
    return prog

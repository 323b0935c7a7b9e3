"""What every layer shares and none owns: the error base class, sizes and units, reading and writing
files safely, reading a JSON document field by field, keeping native libraries off our stdout, lazy
package exports.

The bottom of the import graph: it imports nothing of ours, and nothing heavy (no numpy, no
networkx), so the command line and every package can import it at no cost.
"""

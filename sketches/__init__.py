"""TACCL communication sketches: the model, its JSON format and validation, shipped sketches."""

from sketches.io import FORMAT, load_sketch, shipped_sketches, sketch_from_dict, sketch_to_dict
from sketches.model import InterNode, IntraNode, Sketch, SketchError, rotation
from sketches.restrict import Restriction, restrict

__all__ = [
    "FORMAT",
    "InterNode",
    "IntraNode",
    "Restriction",
    "Sketch",
    "SketchError",
    "load_sketch",
    "restrict",
    "rotation",
    "shipped_sketches",
    "sketch_from_dict",
    "sketch_to_dict",
]

"""TACCL communication sketches: the model, its JSON format and validation, shipped sketches."""

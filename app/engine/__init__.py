"""The speculative decoding engine: plain Python + MLX, no Qt.

Import the pieces from their modules (``app.engine.session``, ``app.engine.events``...);
this package's ``__init__`` stays free of heavy imports so start-up paths remain fast.
"""

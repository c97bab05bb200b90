"""The built-in draft kinds, one plugin module each (``PLUGIN``), listed in
``app.kinds.registry.BUILTIN``.

A plugin module's top level imports checkpoint code only (no MLX): the pairing check, the
CLI and the GUI read it. Its engine hooks import ``app.engine`` inside the methods.
"""

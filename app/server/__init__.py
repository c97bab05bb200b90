"""``draftpair serve``: an OpenAI-compatible HTTP server on the engine (plain Python, no Qt).

- ``engine_thread``: the one thread that owns the Session and every MLX object; a FIFO queue
  of requests in front of it, each with its own cancel flag.
- ``protocol``: request bodies -> ``GenerationRequest`` (validation, limits, extension field).
- ``responses``: engine results -> OpenAI JSON / SSE chunks with llama-server ``timings``.
- ``app``: the Starlette routes, API key, body size limit, JSON errors.
- ``runner``: uvicorn on a bound socket, blocking (CLI) or in a background thread (tests, app).
"""

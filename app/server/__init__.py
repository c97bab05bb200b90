"""``draftpair serve``: an OpenAI-compatible HTTP server on the engine (plain Python, no Qt).

- ``engine_thread``: the one thread that owns the Session and every MLX object; a FIFO queue
  of requests in front of it, each with its own cancel flag.
- ``bodies``: request bytes -> a JSON object (UTF-8, depth, surrogates, NUL, huge numbers).
- ``protocol``: request bodies -> ``GenerationRequest`` (validation, limits, extension field).
- ``errors``: ``ApiError``, an HTTP status with OpenAI's error body.
- ``connections``: uvicorn's protocol with a request-head deadline and a connection cap under
  the open-files limit; one log line per client closed or refused.
- ``responses``: engine results -> OpenAI JSON / SSE chunks with llama-server ``timings``.
- ``app``: the Starlette routes, API key, body size limit, JSON errors.
- ``runner``: uvicorn on a bound socket, blocking (CLI) or in a background thread (tests, app).
"""

"""Remote engines: any OpenAI-compatible endpoint (llama-server, vLLM, LM Studio, another
``draftpair serve``) as a source of the same events the local engine yields (plain Python)."""

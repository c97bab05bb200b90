"""Checkpoints: find, download, import, convert, and the pairing check (no Qt, no mlx at import).

Public API (import from the submodules; each is light to import):
    store.Store(data_dir=None, hf_cache=None)      .list() .get(name) .import_folder(path) .remove(name)
    store.StoreEntry                               name, path, source, size_bytes, kind, param_count, ...
    inspect.inspect_checkpoint(path) -> CheckpointInfo
    pairing.check(target, draft=None, kind=None, context=None) -> PairingReport
    pairing.suggest_drafts(target, store=None, entries=None, context=None) -> Suggestions
    memory_estimate.estimate_memory(target, draft, context=...) -> MemoryEstimate;
                                   memory_estimate.memory_budget()
    hub.search(query) / hub.repo_info(repo_id) / hub.download(repo_id, progress=, cancel=)
    convert.convert(source, quantize=False, ...) -> Path
    gguf_import.import_gguf(path, store=None, progress=, cancel=) -> StoreEntry   GGUF -> MLX
    discovery.discover() -> list[FoundModel]       GGUFs in LM Studio, Ollama, llama.cpp, HF
    resolve.resolve_model(name_or_path) -> Path
    builtins.register(Builtin(...))                models shipped with the app (registered at start-up)

Kinds (CheckpointInfo.kind): chat, base (no chat template: plain-text chat, drafts where it
pairs), draft-candidate, dflash, mtp-target, unsupported (+ reason).
Verdicts: works, works-with-warnings, will-not-work. Errors are DraftPairError subclasses
(StoreError, HubError, DownloadCancelled, ConvertError) whose message is one plain sentence.
"""

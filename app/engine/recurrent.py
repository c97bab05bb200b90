"""Exact rewind of recurrent layers (Gated DeltaNet, Mamba-2 SSM) from what a pass recorded.

While a verify pass runs, two thin hooks record, per recurrent mixer and in call order:
the full input of its causal ``conv1d`` (the ``K-1`` rows of conv state followed by the new
rows) and the inputs of the recurrence function the model module calls
(``gated_delta_update`` for qwen3_5 / qwen3_next, ``ssm_update`` for mamba2 / nemotron_h),
including the state going in, or, for a mixer that advances one token per call (mamba's
``ssm_step``), the state after every step. Keeping ``m`` of the ``S`` fed positions then costs no
projection: the conv state is rows ``m .. m+K-2`` of the recorded input, and the recurrent
state is the one the pass computed after step ``m`` when the recurrence ran step by step
(mlx-lm's ops path: CPU, small heads), else the recurrence re-run over the first ``m`` steps
from the recorded state (one fused kernel on Metal; the layers' heads stacked so every layer
re-runs in the same op).

The hooks are installed once per model (an instance attribute over ``conv1d`` and a wrapper
around the module-level function); they do nothing unless this thread is recording, so
parameters, weights and plain decoding are untouched.
"""

from __future__ import annotations

import inspect
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

# recurrence function -> (state argument, arguments with a sequence axis 1)
RECURRENCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gated_delta_update": ("state", ("q", "k", "v", "a", "b", "mask")),
    "ssm_update": ("state", ("hidden_states", "B", "C", "dt", "mask")),
}
# the head axis of each per-head argument: heads are independent in both recurrences, so the
# layers' heads are stacked and the kept steps re-run once for all layers (one op per step)
HEAD_AXES: dict[str, dict[str, int]] = {
    "gated_delta_update": {"q": 2, "k": 2, "v": 2, "a": 2, "b": 2, "A_log": 0,
                           "dt_bias": 0, "state": 1},
    "ssm_update": {"hidden_states": 2, "B": 2, "C": 2, "dt": 2, "A_log": 0, "D": 0,
                   "dt_bias": 0, "state": 1},
}
MIXER_ATTRS = ("linear_attn", "mixer")
STEP_METHOD = "ssm_step"  # a mixer method advancing the state one token (Mamba v1)

_local = threading.local()


# the per-step function the ops path of the Gated DeltaNet recurrence loops over (CPU and
# small heads): its states are kept as they are computed, so a rewind needs no recompute
STEP_FUNCTIONS = (("mlx_lm.models.gated_delta", "_gated_delta_step_ops"),)


@dataclass
class Recording:
    convs: list[mx.array] = field(default_factory=list)  # full conv inputs, call order
    # (function, its arguments, its name, the state after each step if the ops path ran)
    calls: list[tuple[Any, inspect.BoundArguments, str, list[mx.array]]] = field(
        default_factory=list)
    steps: list[mx.array] | None = None  # filled while one recurrence call runs
    by_mixer: dict[int, int] = field(default_factory=dict)  # step-method mixers -> calls index


class _StepMethodTap:
    """Stands in for a mixer's per-token ``ssm_step`` method (Mamba v1): keeps the state
    going in and the state after every step while a recording is on."""

    def __init__(self, owner: Any, method: Any):
        self.owner, self.method = owner, method

    def __call__(self, x: mx.array, A: mx.array, state: mx.array | None = None) -> Any:
        out = self.method(self.owner, x, A, state)
        rec = getattr(_local, "rec", None)
        if rec is not None:
            i = rec.by_mixer.get(id(self.owner))
            if i is None:
                rec.by_mixer[id(self.owner)] = len(rec.calls)
                rec.calls.append((None, {"state": state}, STEP_METHOD, []))
                i = len(rec.calls) - 1
            rec.calls[i][3].append(out[1])
        return out


class _ConvTap:
    """Stands in for a mixer's ``conv1d``: records the input while a recording is on."""

    def __init__(self, owner: Any):
        self.__dict__["owner"] = owner

    def _conv(self) -> Any:
        return dict.__getitem__(self.__dict__["owner"], "conv1d")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conv(), name)

    def __call__(self, x: mx.array) -> mx.array:
        rec = getattr(_local, "rec", None)
        if rec is not None:
            rec.convs.append(x)
        out: mx.array = self._conv()(x)
        return out


def _wrap_function(module: Any, name: str) -> None:
    fn = getattr(module, name)
    if getattr(fn, "_draftpair_orig", None) is not None:
        return
    orig = fn
    sig = inspect.signature(orig)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        rec = getattr(_local, "rec", None)
        if rec is None:
            return orig(*args, **kwargs)
        rec.steps = []
        try:
            out = orig(*args, **kwargs)
        finally:
            steps, rec.steps = rec.steps, None
        rec.calls.append((orig, sig.bind(*args, **kwargs), name, steps))
        return out

    recorded._draftpair_orig = orig  # type: ignore[attr-defined]
    recorded._draftpair_name = name  # type: ignore[attr-defined]
    setattr(module, name, recorded)


def _wrap_step(module: Any, name: str) -> None:
    fn = getattr(module, name, None)
    if fn is None or getattr(fn, "_draftpair_orig", None) is not None:
        return
    orig = fn

    def kept(*args: Any, **kwargs: Any) -> Any:
        out = orig(*args, **kwargs)
        rec = getattr(_local, "rec", None)
        if rec is not None and rec.steps is not None:
            rec.steps.append(out[1])
        return out

    kept._draftpair_orig = orig  # type: ignore[attr-defined]
    setattr(module, name, kept)


def mixers(model: Any) -> list[Any] | None:
    """The recurrent mixers in forward order, or None if a family is not covered."""
    from app.engine.taps import stack

    try:
        _, layers, _ = stack(model)
    except Exception:
        return None
    found = []
    for layer in layers:
        for attr in MIXER_ATTRS:
            m = layer.get(attr) if isinstance(layer, dict) else None
            if m is not None and isinstance(m, dict) and "conv1d" in m:
                mod = sys.modules.get(type(m).__module__)
                known = mod is not None and any(hasattr(mod, f) for f in RECURRENCES)
                if not known and not callable(getattr(type(m), STEP_METHOD, None)):
                    return None  # a recurrent mixer whose recurrence we do not know
                found.append(m)
    return found


def install(model: Any, n_states: int) -> bool:
    """Install the hooks if every recurrent cache entry maps to a covered mixer."""
    ms = mixers(model)
    if not ms or len(ms) != n_states:
        return False
    for mod_name, fn_name in STEP_FUNCTIONS:
        step_mod = sys.modules.get(mod_name)
        if step_mod is not None:
            _wrap_step(step_mod, fn_name)
    for m in ms:
        mod = sys.modules[type(m).__module__]
        wrapped = False
        for name in RECURRENCES:
            if hasattr(mod, name):
                _wrap_function(mod, name)
                wrapped = True
        if not wrapped and not isinstance(m.__dict__.get(STEP_METHOD), _StepMethodTap):
            object.__setattr__(m, STEP_METHOD, _StepMethodTap(m, getattr(type(m), STEP_METHOD)))
        if not isinstance(m.__dict__.get("conv1d"), _ConvTap):
            object.__setattr__(m, "conv1d", _ConvTap(m))
    return True


def start() -> Recording:
    rec = Recording()
    _local.rec = rec
    return rec


def stop() -> None:
    _local.rec = None


def _group_key(orig: Any, name: str, args: dict[str, Any]) -> tuple[Any, ...] | None:
    """Calls with the same key can be stacked along their head axes (None: run alone)."""
    axes = HEAD_AXES[name]
    if args.get("state") is None or args.get("mask") is not None or args.get("lengths") is not None:
        return None
    parts: list[Any] = [id(orig)]
    for arg, value in sorted(args.items()):
        if arg in axes:
            if not isinstance(value, mx.array):
                return None
            shape = list(value.shape)
            del shape[axes[arg]]
            parts.append((arg, tuple(shape), value.dtype))
        elif isinstance(value, mx.array):
            return None
        else:
            parts.append((arg, repr(value)))
    return tuple(parts)


def _kept_states(calls: list[tuple[Any, dict[str, Any], str, list[mx.array]]], keep: int,
                 fed: int) -> list[mx.array]:
    """The state after the first ``keep`` steps for each call: the one the pass computed if
    it kept its steps, else re-run (stacked groups of layers, one op per step)."""
    out: list[mx.array | None] = [None] * len(calls)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, (orig, args, name, steps) in enumerate(calls):
        if len(steps) == fed:
            out[i] = steps[keep - 1]
            continue
        if name not in RECURRENCES:
            raise RuntimeError(f"{name} recorded {len(steps)} steps of {fed}")
        key = _group_key(orig, name, args)
        groups.setdefault(key if key is not None else ("alone", i), []).append(i)
    for members in groups.values():
        orig, first, name, _ = calls[members[0]]
        seq_args = RECURRENCES[name][1]
        axes = HEAD_AXES[name]
        args = dict(first)
        if len(members) > 1:
            for arg, axis in axes.items():
                if arg in args:
                    args[arg] = mx.concatenate([calls[i][1][arg] for i in members], axis=axis)
        for arg in seq_args:
            if args.get(arg) is not None:
                args[arg] = args[arg][:, :keep]
        state = orig(**args)[1]
        sizes = [calls[i][1]["state"].shape[1] for i in members]
        splits = mx.split(state, [sum(sizes[: j + 1]) for j in range(len(sizes) - 1)], axis=1)
        for i, part in zip(members, splits, strict=True):
            out[i] = part
    done = [s for s in out if s is not None]
    assert len(done) == len(out), "every call's state is kept or recomputed"
    return done


def rebuild(states: list[Any], rec: Recording, fed: int, keep: int) -> list[mx.array]:
    """Set each ArraysCache in ``states`` (forward order) to its value after the first
    ``keep`` of the ``fed`` recorded positions; returns the new arrays (lazy)."""
    if len(rec.convs) != len(states) or len(rec.calls) != len(states):
        raise RuntimeError(
            f"recorded {len(rec.convs)} conv inputs and {len(rec.calls)} recurrences for "
            f"{len(states)} recurrent caches")
    calls = [(orig, bound if isinstance(bound, dict) else dict(bound.arguments), name, steps)
             for orig, bound, name, steps in rec.calls]
    kept: list[mx.array | None]
    if keep:
        kept = list(_kept_states(calls, keep, fed))
    else:
        kept = [args.get("state") for _, args, _, _ in calls]
    out: list[mx.array] = []
    for c, conv_in, state in zip(states, rec.convs, kept, strict=True):
        k1 = conv_in.shape[1] - fed  # rows of conv state
        c[0] = mx.contiguous(conv_in[:, keep : keep + k1])
        c[1] = state
        out.extend(a for a in (c[0], c[1]) if a is not None)
    return out

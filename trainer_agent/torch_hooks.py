"""PyTorch and TorchRec instrumentation: compile spans, DCP checkpoints, init and restore timing.

Nothing here imports torch at module import time; `install(agent)` imports what is installed and
patches only what it finds. Every wrapper calls the original with the same arguments, returns its
result and re-raises its exceptions untouched; the agent's own errors are logged and swallowed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from trainer_agent.agent import Agent, CheckpointSpan

log = logging.getLogger("trainer_agent")

T = TypeVar("T")
_MARK = "__ett_original__"


def _wrap(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace owner.name by make(original), once; False when absent."""
    original = getattr(owner, name, None)
    if original is None:
        return False
    original = getattr(original, _MARK, original)
    wrapper = make(original)
    setattr(wrapper, _MARK, original)
    setattr(owner, name, wrapper)
    return True


def _unwrap(owner: Any, name: str) -> None:
    current = getattr(owner, name, None)
    original = getattr(current, _MARK, None)
    if original is not None:
        setattr(owner, name, original)


def _is_recompile(compile_id: str) -> bool:
    """True for Dynamo compile ids like '0/1' or '[0/1]0/2_1': a frame compiled again."""
    tail = compile_id.rsplit("]", 1)[-1]
    if "/" not in tail:
        return False
    count = tail.split("/", 1)[1].split("_", 1)[0]
    return count.isdigit() and int(count) > 0


def _checkpoint_bytes(kwargs: dict[str, Any]) -> int | None:
    """Size of a local checkpoint directory, when the save named one."""
    path = kwargs.get("checkpoint_id")
    writer = kwargs.get("storage_writer")
    if path is None and writer is not None:
        path = getattr(writer, "path", None)
    if path is None:
        return None
    try:
        path = os.fspath(path)
    except TypeError:
        return None
    if not os.path.isdir(path):
        return None
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


class TorchHooks:
    """Installed instrumentation for one agent; `uninstall()` puts the originals back."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._records: list[dict[str, Any]] = []
        self._patched: list[tuple[Any, str]] = []
        self._compile_starts: dict[str, float] = {}
        self._handler: Any = None
        self._orig_clear: Any = None
        self._lock = threading.Lock()

    # ---- PT2 compile -----------------------------------------------------------------------

    def install_compile(self) -> bool:
        """Report each Dynamo compilation as a pt2_compile span (pt2_compile.recompile for recompiles)."""
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:
            return False
        self._handler = callback_handler
        self._register_compile_callbacks()
        # torch._dynamo.reset() clears every callback; re-register ours right after it does.
        self._orig_clear = callback_handler.clear
        hooks = self

        def clear() -> None:
            hooks._orig_clear()
            hooks._register_compile_callbacks()

        callback_handler.clear = clear
        return True

    def _register_compile_callbacks(self) -> None:
        handler = self._handler
        if self._on_compile_start not in handler.start_callbacks:
            handler.register_start_callback(self._on_compile_start)
        if self._on_compile_end not in handler.end_callbacks:
            handler.register_end_callback(self._on_compile_end)

    def _on_compile_start(self, args: Any) -> None:
        try:
            start = self.agent._clock()
            with self._lock:
                self._compile_starts[str(getattr(args, "compile_id", ""))] = start
            self.agent._progress_break(start)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: compile start hook failed")

    def _on_compile_end(self, args: Any) -> None:
        try:
            end = self.agent._clock()
            compile_id = str(getattr(args, "compile_id", ""))
            with self._lock:
                start = self._compile_starts.pop(compile_id, None)
            if start is None:
                return
            self._records.append({"compile_id": compile_id, "start": start, "end": end})
            # Dynamo files its metrics only after the end callbacks; the id already tells a
            # recompile ("<frame>/<n>" with n > 0), the reason is looked up later.
            name = "pt2_compile.recompile" if _is_recompile(compile_id) else "pt2_compile"
            self.agent.record_phase(name, start, end)
            self.agent._progress_resume(end)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: compile end hook failed")

    @property
    def compile_records(self) -> list[dict[str, Any]]:
        """Each compilation seen: id, start, end, recompile_reason, cache_hits, co_name."""
        for record in self._records:
            if "cache_hits" not in record:
                record.update(self._metrics_for(record["compile_id"]))
                if record.get("recompile_reason"):
                    log.info(
                        "trainer_agent: recompile %s: %s",
                        record["compile_id"],
                        record["recompile_reason"],
                    )
        return list(self._records)

    @staticmethod
    def _metrics_for(compile_id: str) -> dict[str, Any]:
        """Recompile reason and cache hits of one compilation, from Dynamo's metrics."""
        try:
            from torch._dynamo.utils import get_compilation_metrics

            metrics = [m for m in get_compilation_metrics() if str(m.compile_id) == compile_id]
        except Exception:  # noqa: BLE001
            return {}
        if not metrics:
            return {}
        last = metrics[-1]
        hits = 0
        for field in (
            "inductor_fx_local_cache_hit_count",
            "inductor_fx_remote_cache_hit_count",
            "aotautograd_local_cache_hit_count",
            "aotautograd_remote_cache_hit_count",
        ):
            hits += int(getattr(last, field, 0) or 0)
        return {
            "recompile_reason": getattr(last, "recompile_reason", None),
            "cache_hits": hits,
            "co_name": getattr(last, "co_name", None),
        }

    # ---- torch.distributed -----------------------------------------------------------------

    def install_distributed(self) -> bool:
        """Time init_process_group (trainer_init.process_group)."""
        try:
            import torch.distributed as dist
            import torch.distributed.distributed_c10d as c10d
        except ImportError:
            return False
        agent = self.agent

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def init_process_group(*args: Any, **kwargs: Any) -> Any:
                with agent.phase("trainer_init.process_group"):
                    return original(*args, **kwargs)

            return init_process_group

        for owner in (dist, c10d):
            if _wrap(owner, "init_process_group", make):
                self._patched.append((owner, "init_process_group"))
        return True

    def install_checkpoint(self) -> bool:
        """Checkpoint spans for DCP save/async_save, restore spans for DCP load."""
        try:
            import torch.distributed.checkpoint as dcp
        except ImportError:
            return False
        # Only the public names: DCP's own executors call state_dict_saver.save internally,
        # and patching that would report every async save twice.
        for name, make in (
            ("save", self._make_save),
            ("async_save", self._make_async_save),
            ("load", self._make_load),
        ):
            if _wrap(dcp, name, make):
                self._patched.append((dcp, name))
        return True

    def _begin(self) -> CheckpointSpan | None:
        try:
            return self.agent.checkpoint_begin()
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: checkpoint begin failed")
            return None

    def _wrap_save(
        self, original: Callable[..., Any], after_blocking: Callable[..., None]
    ) -> Callable[..., Any]:
        """Time a DCP save: blocking until it returns, then `after_blocking(result, span, kw)`."""
        hooks = self

        @functools.wraps(original)
        def save(*args: Any, **kwargs: Any) -> Any:
            span = hooks._begin()
            try:
                result = original(*args, **kwargs)
            except BaseException:
                if span is not None:
                    span.failed()
                raise
            if span is not None:
                span.blocking_done()  # control is back in the training loop
                after_blocking(result, span, kwargs)
            return result

        return save

    def _make_save(self, original: Callable[..., Any]) -> Callable[..., Any]:
        return self._wrap_save(
            original, lambda _result, span, kw: span.committed(bytes=self._size(kw))
        )

    def _make_async_save(self, original: Callable[..., Any]) -> Callable[..., Any]:
        return self._wrap_save(original, self._on_upload_done)

    def _size(self, kwargs: dict[str, Any]) -> int | None:
        try:
            return _checkpoint_bytes(kwargs)
        except Exception:  # noqa: BLE001
            return None

    def _on_upload_done(self, result: Any, span: CheckpointSpan, kwargs: dict[str, Any]) -> None:
        """Commit the span when the upload future finishes (Future or AsyncSaveResponse)."""
        try:
            future = getattr(result, "upload_completion", result)
            if not hasattr(future, "add_done_callback"):
                span.committed(bytes=self._size(kwargs))
                return

            def done(fut: Any) -> None:
                try:
                    error = fut.exception() if hasattr(fut, "exception") else None
                except BaseException:  # noqa: BLE001 - a cancelled future raises here
                    error = True
                if error:
                    span.failed()
                else:
                    span.committed(bytes=self._size(kwargs))

            future.add_done_callback(done)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: async checkpoint hook failed")

    def _make_load(self, original: Callable[..., Any]) -> Callable[..., Any]:
        agent = self.agent

        @functools.wraps(original)
        def load(*args: Any, **kwargs: Any) -> Any:
            with agent.phase("checkpoint_restore"):
                return original(*args, **kwargs)

        return load

    # ---- TorchRec --------------------------------------------------------------------------

    def install_torchrec(self) -> bool:
        """Time DistributedModelParallel construction (trainer_init.train_module)."""
        try:
            from torchrec.distributed.model_parallel import DistributedModelParallel
        except ImportError:
            return False
        agent = self.agent

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def __init__(model_self: Any, *args: Any, **kwargs: Any) -> None:
                with agent.phase("trainer_init.train_module"):
                    original(model_self, *args, **kwargs)

            return __init__

        if _wrap(DistributedModelParallel, "__init__", make):
            self._patched.append((DistributedModelParallel, "__init__"))
        return True

    # ---- teardown --------------------------------------------------------------------------

    def uninstall(self) -> None:
        """Restore every patched function and remove the compile callbacks."""
        for owner, name in reversed(self._patched):
            _unwrap(owner, name)
        self._patched.clear()
        handler = self._handler
        if handler is not None:
            if self._orig_clear is not None:
                handler.clear = self._orig_clear
            for lst, cb in (
                (handler.start_callbacks, self._on_compile_start),
                (handler.end_callbacks, self._on_compile_end),
            ):
                if cb in lst:
                    lst.remove(cb)
            self._handler = None


def install(
    agent: Agent,
    *,
    compile: bool = True,
    distributed: bool = True,
    checkpoint: bool = True,
    torchrec: bool | None = None,
) -> TorchHooks:
    """Instrument torch in this process for `agent`; torchrec=None patches it only if imported."""
    hooks = TorchHooks(agent)
    steps: list[tuple[bool, Callable[[], bool]]] = [
        (compile, hooks.install_compile),
        (distributed, hooks.install_distributed),
        (checkpoint, hooks.install_checkpoint),
        (
            torchrec if torchrec is not None else "torchrec" in sys.modules,
            hooks.install_torchrec,
        ),
    ]
    for wanted, step in steps:
        if wanted:
            try:
                step()
            except Exception:  # noqa: BLE001
                log.exception("trainer_agent: %s failed", step.__name__)
    return hooks


def timed_first_batch(agent: Agent, loader: Iterable[T]) -> Iterator[T]:
    """Iterate `loader`, reporting the wait for its first batch as trainer_init.first_batch."""
    span = agent.phase("trainer_init.first_batch")
    span.__enter__()
    try:
        iterator = iter(loader)
        first = next(iterator)
    except StopIteration:
        span.__exit__(None, None, None)
        return
    except BaseException as err:
        span.__exit__(type(err), err, err.__traceback__)
        raise
    span.__exit__(None, None, None)
    yield first
    yield from iterator


def restore(agent: Agent) -> Any:
    """`with restore(agent):` around a non-DCP restore (checkpoint_restore span)."""
    return agent.phase("checkpoint_restore")

"""Chapter 6 and Going deeper: what ``torch.compile`` does to an input block, the aten operators eager runs, the kernels
and loop nests Inductor generates instead, where Dynamo splits a model into several graphs, and how often it
compiles as the sequence length changes.

Shapes: ``b`` batch, ``s`` sequence, ``d`` model width.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: a generated kernel's definition in Inductor's output module: ``name = async_compile.cpp_pybinding(...)`` on a
#: CPU, ``name = async_compile.triton(...)`` on a GPU
_KERNEL = re.compile(r"^(\w+) = async_compile\.(cpp_pybinding|cpp|triton)\(", re.M)
#: a kernel's name ends with the aten operators fused into it: ``cpp_fused_add_embedding_mul_0``,
#: ``triton_per_fused_add_embedding_native_layer_norm_0``
_FUSED_NAME = re.compile(r"fused_(\w+?)_\d+$")
#: a call from the generated ``call`` function to a library kernel instead of a generated one
_LIBRARY_CALL = re.compile(r"\b(extern_kernels\.\w+|aten\.[\w.]+)\(")


class _OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:  # a view makes no pass over the data
            self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def eager_ops(fn: Callable, *args) -> list[str]:
    """The aten operators ``fn(*args)`` runs in eager mode, in order (``"aten.embedding"``, ...); views, which move
    no data, are left out. Each one is a separate kernel that reads its inputs from memory and writes its output."""
    with _OpRecorder() as recorder:
        fn(*args)
    return recorder.ops


def compile_and_read(fn: Callable, *args, dynamic: bool | None = False) -> tuple[Callable, object, list[str]]:
    """``torch.compile(fn, dynamic=dynamic)``, run once on ``args``: returns the compiled callable (later calls with
    inputs of the same shapes reuse its code), the output, and the source of each module Inductor generated (one
    per compiled graph). Compiling takes seconds; on a CPU it needs a C++ compiler."""
    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(fn, dynamic=dynamic)
    out, sources = run_and_get_code(compiled, *args)
    return compiled, out, list(sources)


def _loop_nests(body: str) -> int:
    """Number of outermost ``for`` loops in a C++ kernel body (loops inside another loop's braces not counted)."""
    depth, open_fors, count = 0, [], 0  # open_fors: depths of the enclosing for statements
    for line in body.splitlines():
        if re.match(r"\s*for\(", line):
            if not open_fors:
                count += 1
            open_fors.append(depth)
        for char in line:
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                while open_fors and open_fors[-1] >= depth:
                    open_fors.pop()
    return count


def code_facts(sources: str | list[str]) -> dict:
    """What Inductor generated, read from its source (one module or a list, as :func:`compile_and_read` returns).

    Returns ``kernels``: one dict per generated kernel with its ``name``, the aten operators ``fused`` into it as
    they appear in the name (``"add_embedding_mul"``, joined by ``_``) and, for a C++ kernel, its ``loop_nests``
    (outermost loops: each makes one pass over its data; ``None`` for a Triton kernel); ``library_calls``: the
    calls to library kernels instead of generated ones (``aten.randint.low_out``, the seed of compiled dropout;
    ``extern_kernels.mm``, a matrix product).
    """
    kernels, library_calls = [], []
    for source in [sources] if isinstance(sources, str) else sources:
        matches = list(_KERNEL.finditer(source))
        for i, match in enumerate(matches):
            name, kind = match.groups()
            end = matches[i + 1].start() if i + 1 < len(matches) else len(source)
            body = source[match.end() : end]
            fused = _FUSED_NAME.search(name)
            loops = None if kind == "triton" else _loop_nests(body[: body.find("''')")])
            kernels.append({"name": name, "fused": fused.group(1) if fused else "", "loop_nests": loops})
        call = source[source.find("def call(") :]
        library_calls += _LIBRARY_CALL.findall(call)
    return {"kernels": kernels, "library_calls": library_calls}


def graphs_and_breaks(fn: Callable, *args) -> tuple[int, list[str]]:
    """How many graphs Dynamo splits ``fn(*args)`` into, and why: the first line of each graph break's reason
    (``"Unsupported Tensor.item() call ..."`` for a host read such as ``int(tensor)``). One graph and no reasons
    means the whole call compiles as one piece.

    ``torch._dynamo.explain`` traces only, compiles nothing, and calls ``torch.compiler.reset()`` before and after
    (every compiled function of the process compiles again when next called).
    """
    with _collected_warnings():  # Dynamo logs each break as a warning too: the reasons are returned instead
        explained = torch._dynamo.explain(fn)(*args)
    return explained.graph_count, [str(reason.reason).splitlines()[0] for reason in explained.break_reasons]


class CountingBackend:
    """A ``torch.compile`` backend that compiles nothing: it records the input shapes of each graph Dynamo hands it
    and returns the graph to run as it is (eager). ``len(backend.graphs)`` counts the compilations, cheaply.

    ``graphs[i]`` lists the shapes of graph ``i``'s tensor inputs, with ``"s"`` for a dimension Dynamo made
    symbolic (one graph then serves every size of that dimension).
    """

    def __init__(self):
        self.graphs = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        traced = [node.meta.get("example_value") for node in gm.graph.find_nodes(op="placeholder")]
        shapes = [
            tuple(n if isinstance(n, int) else "s" for n in t.shape) for t in traced if isinstance(t, torch.Tensor)
        ]
        self.graphs.append(shapes)
        return gm.forward


def compiles_per_length(
    fn: Callable, inputs: list[torch.Tensor], *, dynamic: bool | None, mark_dim: int | None = None
) -> tuple[CountingBackend, list[str]]:
    """Call ``torch.compile(fn, backend=CountingBackend(), dynamic=dynamic)`` on each of ``inputs`` in turn (e.g.
    ids ``(b, s)`` of growing ``s``) after ``torch.compiler.reset()``, which discards every compiled function of the
    process. With ``mark_dim``, ``torch._dynamo.mark_dynamic`` marks that dimension of the first input as symbolic
    before the first call.

    Returns the backend (``len(backend.graphs)`` compilations) and the messages Dynamo logged as warnings (the
    recompile limit, ``torch._dynamo.config.recompile_limit``, is reported only there).
    """
    torch.compiler.reset()
    backend = CountingBackend()
    compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
    if mark_dim is not None:
        with torch.inference_mode(inputs[0].is_inference()):  # a copy like the others: guards check inference-ness
            first = inputs[0].clone()  # the mark stays on a tensor: mark a copy, not the caller's
        inputs = [first, *inputs[1:]]
        torch._dynamo.mark_dynamic(inputs[0], mark_dim)
    with _collected_warnings() as messages:
        for x in inputs:
            compiled(x)
    torch.compiler.reset()
    return backend, messages


@contextlib.contextmanager
def _collected_warnings():
    """Collect the messages ``torch._dynamo`` logs as warnings in a list, instead of printing them to stderr."""
    logger, handler = logging.getLogger("torch._dynamo"), _Collect()
    handlers, logger.handlers = logger.handlers, [handler]
    try:
        yield handler.messages
    finally:
        logger.handlers = handlers


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

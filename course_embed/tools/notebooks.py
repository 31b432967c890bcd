"""Execute notebooks in place so that re-running an unchanged notebook leaves ``git diff`` empty.

nbclient runs each notebook with ``record_timing=False`` (no timestamps in cell metadata) and
``store_widget_state=True`` (widgets render on the static site). Widget model ids, which are random UUIDs, are
renamed to ids derived from the notebook's name and the widget's creation order, and stream outputs, which
arrive in timing-dependent chunks, are merged.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import nbformat
from nbclient import NotebookClient

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def stable_widget_ids(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Rename every widget model id to ``uuid5(name, creation index)``; returns the renamed notebook."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    if not state:
        return nb
    text = json.dumps(nb)
    for index, old in enumerate(state):
        text = text.replace(old, uuid.uuid5(uuid.NAMESPACE_URL, f"course_embed/{name}/{index}").hex)
    return nbformat.from_dict(json.loads(text))


def coalesce_streams(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Merge consecutive stdout (or stderr) outputs of a cell, which arrive in timing-dependent chunks."""
    for cell in nb.cells:
        merged = []
        for out in cell.get("outputs", []):
            last = merged[-1] if merged else None
            if out.output_type == "stream" and last and last.output_type == "stream" and last.name == out.name:
                last.text += out.text
            else:
                merged.append(out)
        if cell.cell_type == "code":
            cell.outputs = merged
    return nb


def execute_notebook(path: str | Path, timeout: int = 600, kernel_name: str = "python3") -> float:
    """Execute the notebook at ``path`` in its own directory and write it back; returns wall seconds."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        record_timing=False,
        store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(stable_widget_ids(coalesce_streams(nb), path.stem), path)
    return seconds

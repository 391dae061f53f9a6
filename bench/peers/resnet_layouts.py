#!/usr/bin/env python3
"""Why Tandem's ResNet-18 runs channels-last on the GPU: PyTorch's own ResNet-18 CIFAR training step
(the model of graph_step_peer.py, SGD Nesterov, a batch gathered by index from a GPU-resident pool)
at batch 128 and 512, eager and captured in a CUDA graph (torch.cuda.graph), with three memory
layouts: NCHW throughout ("nchw"), only the input converted to channels-last with the weights left
NCHW ("input_cl", what common/torch/models.cpp does), and model and input channels-last ("full").
Median ms per step over 100 steps after 20 (CUDA events). Needs a CUDA GPU.

    python3 bench/peers/resnet_layouts.py
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_step_peer import ResNet18, median_ms  # noqa: E402


def step_ms(layout, graph, batch, device):
    torch.manual_seed(0)
    model = ResNet18().to(device)
    if layout == "full":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    pool_x = torch.randn(batch * 8, 3, 32, 32, device=device)
    pool_y = torch.randint(0, 10, (batch * 8,), device=device)
    rows = torch.randint(0, batch * 8, (batch,), device=device)

    def body():
        x, y = pool_x.index_select(0, rows), pool_y.index_select(0, rows)
        if layout != "nchw":
            x = x.contiguous(memory_format=torch.channels_last)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss

    if not graph:
        return median_ms(body, 20, 100)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (cuDNN's algorithm search, the optimizer's state) off the graph
        for _ in range(5):
            body()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    return median_ms(g.replay, 20, 100)


def main():
    if not torch.cuda.is_available():
        sys.exit("resnet_layouts.py needs a CUDA GPU and torch sees none")
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda", 0)
    print(f"torch {torch.__version__}, cuDNN TF32 {torch.backends.cudnn.allow_tf32}")
    print(f"{'batch':>5} {'layout':<9} {'eager ms':>9} {'graph ms':>9}")
    for batch in (128, 512):
        for layout in ("nchw", "input_cl", "full"):
            eager, graph = step_ms(layout, False, batch, device), step_ms(layout, True, batch, device)
            print(f"{batch:>5} {layout:<9} {eager:>9.3f} {graph:>9.3f}", flush=True)


if __name__ == "__main__":
    main()

"""Tandem's built-in networks in PyTorch, layer for layer: the same layers, shapes and state_dict names
as the C++ models (common/torch/builtin_nets/networks.cpp), so a Tandem checkpoint or published
weights load into them with load_state_dict, and they compute the same function (the peers of
`tandem-bench graph` and `ddp` train them; tools/export_aoti.py exports them).

Needs torch alone: ``import tandem.builtin_nets`` in an installed package, or this file loaded by
path where the extension is not built (tools/export_aoti.py and bench/peers/twins.py do that).

    model = ResNet18(c=3, classes=10)     # Tandem's "resnet18" for 32x32 inputs
    model = Cnn(c=1, h=28, w=28)          # Tandem's "cnn"
"""
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["Cnn", "ResNet18"]


def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class Cnn(nn.Module):  # Tandem's "cnn" (and its state_dict names): two conv-BN-ReLU-maxpool blocks, one hidden layer
    def __init__(self, c=3, h=32, w=32, classes=10):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(c, 16), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = conv3x3(16, 32), nn.BatchNorm2d(32)
        self.fc1, self.fc2 = nn.Linear(32 * (h // 4) * (w // 4), 128), nn.Linear(128, classes)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = conv3x3(cout, cout), nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet18(nn.Module):  # Tandem's "resnet18" for 32x32 inputs: 3x3 stem, no max-pool; its state_dict names
    def __init__(self, c=3, classes=10):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(c, 64), nn.BatchNorm2d(64)
        cin = 64
        for layer, width in enumerate([64, 128, 256, 512]):
            setattr(self, f"layer{layer + 1}",
                    nn.Sequential(BasicBlock(cin, width, 2 if layer > 0 else 1), BasicBlock(width, width, 1)))
            cin = width
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))

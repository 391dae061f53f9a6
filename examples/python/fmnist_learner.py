#!/usr/bin/env python3
"""A learner written in Python, run by `tandem run` in place of tandem-learner:

    tandem run --set run.learner_program=/usr/bin/python3 --set run.learner_args=examples/python/fmnist_learner.py

It trains the built-in cnn's twin (the same parameter names, shapes and dtypes, so the same model
signature) on the job's dataset cache with tandem.HostFeed, publishes its weights into the job's slab
with tandem.WeightPublisher every learner.publish_every_steps steps, and reports its metrics row through
tandem.job(); the C++ evaluators (tandem-actor) follow the slab and evaluate every version, and
`tandem status` and the dashboard show this process like the built-in learner. The job's keys come from
$TANDEM_CONFIG (the run dir's job.toml): data.name, mean, std, train_split; supervised.batch_size,
epochs (or steps), feed_workers; optimizer.lr, momentum, nesterov, weight_decay; learner.seed, threads,
report_every_steps; publish.every_steps.
"""
import os
import time
import tomllib

import torch
import torch.nn.functional as F

import tandem


class Cnn(torch.nn.Module):
    """common/torch/models.cpp's cnn: conv-BN-ReLU-pool twice, then two linear layers."""

    def __init__(self, channels, height, width, classes):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, 16, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(32)
        self.fc1 = torch.nn.Linear(32 * (height // 4) * (width // 4), 128)
        self.fc2 = torch.nn.Linear(128, classes)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


def floats(text):
    return [float(v) for v in str(text).split(",")]


def main():
    config = tomllib.load(open(os.environ["TANDEM_CONFIG"], "rb"))
    data, learner, model_keys = config["data"], config["learner"], config["model"]
    supervised, optim, publish = config["supervised"], config["optimizer"], config["publish"]
    torch.manual_seed(model_keys["seed"])
    torch.set_num_threads(learner["threads"])
    with tandem.job() as job:
        feed = tandem.HostFeed(data["name"], supervised["batch_size"], split=data["train_split"], seed=learner["seed"],
                               mean=floats(data["mean"]), std=floats(data["std"]), device="cpu",
                               workers=supervised["feed_workers"])
        _, channels, height, width = feed.dataset["x"].shape
        model = Cnn(channels, height, width, model_keys["num_classes"])
        optimizer = torch.optim.SGD(model.parameters(), lr=optim["lr"], momentum=optim["momentum"],
                                    nesterov=optim["nesterov"], weight_decay=optim["weight_decay"])
        # optimizer=: the copy into the slab overlaps the next forward and backward, fenced before step().
        publisher = tandem.WeightPublisher(model, model_name=model_keys["name"], optimizer=optimizer)
        total = supervised["steps"] or supervised["epochs"] * len(feed)
        print(f"python learner: cnn twin (signature {publisher.signature:016x}), {total} steps of "
              f"{supervised['batch_size']} on '{data['name']}', publishing to /{publisher.slab}", flush=True)
        publisher.publish(0)
        step, samples, correct, losses, window = 0, 0, 0, [], time.perf_counter()
        while step < total and not job.should_stop:
            for x, y in feed:
                logits = model(x)
                loss = F.cross_entropy(logits, y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                step += 1
                samples += y.shape[0]
                losses.append(float(loss))
                correct += int((logits.argmax(1) == y).sum())
                if publish["every_steps"] and step % publish["every_steps"] == 0:
                    publisher.publish(step)
                if step % learner["report_every_steps"] == 0:
                    seconds = time.perf_counter() - window
                    n = learner["report_every_steps"] * supervised["batch_size"]
                    job.report(step=step, epoch=feed.epoch, samples=samples, loss=sum(losses) / len(losses),
                               accuracy=correct / n, samples_per_s=n / seconds, lr=optim["lr"],
                               version=publisher.next_version - 1)
                    losses, correct, window = [], 0, time.perf_counter()
                if step >= total or job.should_stop:
                    break
        version = publisher.publish_final(step)
        job.saw_version(version)
        job.report(step=step, epoch=feed.epoch, samples=samples, version=version)
        print(f"python learner: {'finished' if step >= total else 'stopped'} at step {step}; final weights version "
              f"{version}", flush=True)


if __name__ == "__main__":
    main()

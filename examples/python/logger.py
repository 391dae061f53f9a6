"""A user program beside the learner and the actors: `[[run.group]] name = "logger"` in
examples/programs.toml. It joins the job with tandem.job() (so the launcher checks its heartbeat,
restarts it if it crashes or hangs, and asks it to stop through the control block), follows the
launcher's <run_dir>/metrics.jsonl and prints one line per learner report: where your own logging
(TensorBoard, W&B, a database) would go. Its own row in `tandem status` counts the records it saw.
"""
import json
import os
import time

import tandem


def main():
    with tandem.job() as job:
        path = os.path.join(job.run_dir, "metrics.jsonl")
        offset, seen = 0, 0
        while not job.should_stop:
            if os.path.exists(path):
                with open(path) as f:
                    f.seek(offset)
                    for line in f:
                        if not line.endswith("\n"):
                            break  # a record still being written: read it next time
                        offset += len(line.encode())
                        record = json.loads(line)
                        if record.get("role") == "learner" and "loss" in record:
                            seen += 1
                            print(f"{job.name}: step {record.get('step')} loss {record['loss']:.4f}", flush=True)
            job.report(step=seen)
            time.sleep(1.0)
        print(f"{job.name}: stopping after {seen} learner records", flush=True)


if __name__ == "__main__":
    main()

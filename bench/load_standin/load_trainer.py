"""Stand-in trainer of the Celery load bench: ``load_trainer.py STEPS SPEED SECONDS`` prints one
step line in the smoke framework's format every SECONDS/STEPS seconds (the trial lasts about
SECONDS, sleeping), then the final line of its one rank."""
import sys
import time

steps, speed, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
t0 = time.monotonic()
for i in range(1, steps + 1):
    time.sleep(seconds / steps)
    print(f"[smoke-bert] iteration={i} samples_per_sec={speed + i % 2} loss=1.0 time={time.monotonic() - t0:.3f}",
          flush=True)
print(f"[smoke-bert] final rank=0 world_size=1 iterations={steps}", flush=True)

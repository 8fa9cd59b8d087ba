"""A driver that runs a recorded ``DataParallelTrainer`` until Ctrl-C; ``test_ray_train.py`` runs
it in a subprocess and sends it SIGINT, as a user stopping ``fit()`` would.

``python -m tests.orchestration.ray_train_abort_driver RAY_ADDRESS STORE_URL STORAGE_PATH``
connects to the test session's Ray and fits a 2-worker trainer of many steps; Ray Train's SIGINT
handler (the driver's main thread) asks the controller to abort.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Connect, fit until interrupted."""
    import cloudpickle
    import ray

    from examples import ray_train_recorded

    address, url, storage = sys.argv[1:4]
    ray.init(address=address, log_to_driver=False)
    cloudpickle.register_pickle_by_value(ray_train_recorded)
    print("fitting", flush=True)
    # hold_s=0: this run writes from its first event (the other tests keep the default hold)
    ray_train_recorded.make_trainer(url, storage, steps=500, hold_s=0).fit()


if __name__ == "__main__":
    main()

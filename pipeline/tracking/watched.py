"""MLflow's client with its calls timed, so that a store that stops answering is said rather than waited on, and
whole, so that a Ctrl-C never lands inside one."""

from __future__ import annotations

import threading
import time

from mlflow.tracking import MlflowClient

from pipeline import whole

STALL_S = 10.0  # a call to the store unanswered this long is said (MLflow retries a server for minutes)


class WatchedClient:
    """An MlflowClient whose calls are timed: a call its store leaves unanswered for STALL_S is said, once, and so is
    the store's next answer. A tracking server that stops answering otherwise holds the command without a word until
    MLflow's retries give up, minutes later."""

    stalled: dict[str, float] = {}  # store URI -> since when it has not answered, once said
    lock = threading.Lock()

    def __init__(self, client: MlflowClient, uri: str) -> None:
        self._client, self._uri = client, uri

    def __getattr__(self, name: str):
        if name.startswith("_"):  # not the client's: pickle asks for these (a launcher ships the callbacks to its jobs)
            raise AttributeError(name)
        method = getattr(self._client, name)

        def watched(*args, **kwargs):
            timer = threading.Timer(STALL_S, self._stalled, (time.monotonic(),))
            timer.daemon = True
            timer.start()
            try:
                with whole.call():  # cut between its write and its commit, a call leaves SQLite locked
                    value = method(*args, **kwargs)
            finally:
                timer.cancel()
            with self.lock:
                since = self.stalled.pop(self._uri, None)
            if since is not None:
                print(f"[mlflow] {self._uri} answers again, after {time.monotonic() - since:.0f} s", flush=True)
            return value

        return watched

    def _stalled(self, since: float) -> None:
        with self.lock:
            if self._uri in self.stalled:
                return
            self.stalled[self._uri] = since
        print(
            f"[mlflow] {self._uri} has not answered for {STALL_S:.0f} s; waiting for it (MLflow retries for minutes "
            "before the command stops with an error)",
            flush=True,
        )

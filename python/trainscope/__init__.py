"""trainscope's hook for programs that do not link its runtime (a TensorFlow task): one line adds
what only the program knows (its steps, its phase, whom it waits on) to what the node's
trainscope-sidecar sees of the task from outside. The sidecar then judges the task as one of its
own runtime's: stalled when its loop is wedged, slow, its goodput and incidents.

    import trainscope
    hooks=[trainscope.StepHook()]                 # tf.compat.v1.train.MonitoredTrainingSession
    callbacks=[trainscope.KerasCallback()]        # Model.fit
    trainscope.step()                             # a custom loop: after each step

The task's role and index come from TF_CONFIG; the sidecar from $TRAINSCOPE_REPORT_ENDPOINT
(host:port of its gRPC port), else $OTEL_EXPORTER_OTLP_ENDPOINT's http://host:port (the same
port takes spans), else 127.0.0.1:4317. Reports go out from one thread, twice a second; a
sidecar that is not there costs nothing but a failed call, and never an exception in training.
"""

from .reporter import Reporter, reporter, step, set_phase, wait_on  # noqa: F401


def StepHook():  # noqa: N802 (a class to the user)
    """A tf.compat.v1.train.SessionRunHook: every session.run is a step."""
    from .tensorflow import StepHook as _StepHook
    return _StepHook()


def KerasCallback():  # noqa: N802
    """A tf.keras.callbacks.Callback: every train batch is a step."""
    from .tensorflow import KerasCallback as _KerasCallback
    return _KerasCallback()

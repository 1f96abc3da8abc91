"""The hook in TensorFlow's own shapes: a SessionRunHook (TF1, MonitoredTrainingSession) and a
Keras callback (Model.fit)."""

import tensorflow as tf

from .reporter import reporter


class StepHook(tf.compat.v1.train.SessionRunHook):
    def begin(self):
        self._reporter = reporter()
        self._reporter.set_phase("creating_session")

    def after_create_session(self, session, coord):
        self._reporter.set_phase("training")

    def after_run(self, run_context, run_values):
        self._reporter.step()

    def end(self, session):
        self._reporter.set_phase("done")


class KerasCallback(tf.keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self._reporter = reporter()
        self._reporter.set_phase("training")

    def on_train_batch_end(self, batch, logs=None):
        self._reporter.step()

    def on_train_end(self, logs=None):
        self._reporter.set_phase("done")

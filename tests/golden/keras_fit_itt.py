"""Train and evaluate a tiny Keras model with ``model.fit``.

A small fully-connected classifier is compiled and trained on synthetic
NumPy data using the high-level Keras API, then evaluated on a held-out
synthetic test set. Seeds and threading are fixed for reproducibility.

Usage:
    python keras_fit.py
"""

import numpy as np
import tensorflow as tf
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of keras_fit.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.keras_fit")

# ----------------------------------------------------------------------------
# Hyper-parameters and constants
# ----------------------------------------------------------------------------
SEED = 0
EPOCHS = 2
BATCH_SIZE = 16
LEARNING_RATE = 0.01
TRAIN_SAMPLES = 256
TEST_SAMPLES = 64
NUM_FEATURES = 10
NUM_CLASSES = 3
HIDDEN_UNITS = 32

# Determinism: fixed seeds and single-threaded execution.
# Keras 3 draws default initializer seeds from Python's `random` module,
# so seed it too via keras.utils.set_random_seed (python, numpy and TF).
tf.keras.utils.set_random_seed(SEED)
np.random.seed(SEED)
tf.random.set_seed(SEED)
tf.config.experimental.enable_op_determinism()
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)


def make_data(num_samples, projection):
    """Synthetic classification data: label = argmax of a fixed projection."""
    features = np.random.randn(num_samples, NUM_FEATURES).astype(np.float32)
    labels = np.argmax(features @ projection, axis=1).astype(np.int32)
    return features, labels


def build_model():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(NUM_FEATURES,)),
            tf.keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            tf.keras.layers.Dense(NUM_CLASSES, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate=LEARNING_RATE),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def main():
    projection = np.random.randn(NUM_FEATURES, NUM_CLASSES).astype(np.float32)
    x_train, y_train = make_data(TRAIN_SAMPLES, projection)
    x_test, y_test = make_data(TEST_SAMPLES, projection)

    model = build_model()
    itt.resume()
    itt.task_begin(_autoitt_domain, "fit")
    try:
        with itt.library(model, "fit", _autoitt_domain):
            history = model.fit(
                x_train,
                y_train,
                epochs=EPOCHS,
                batch_size=BATCH_SIZE,
                verbose=0,
                shuffle=False,
            )
    finally:
        itt.task_end(_autoitt_domain)
        itt.pause()

    for epoch, (loss, accuracy) in enumerate(
        zip(history.history["loss"], history.history["accuracy"])
    ):
        print(f"Epoch {epoch + 1}/{EPOCHS}: loss {loss:.6f} accuracy {accuracy:.6f}")

    itt.resume()
    itt.task_begin(_autoitt_domain, "evaluate")
    try:
        with itt.library(model, "evaluate", _autoitt_domain):
            test_loss, test_accuracy = model.evaluate(
                x_test, y_test, batch_size=BATCH_SIZE, verbose=0
            )
    finally:
        itt.task_end(_autoitt_domain)
        itt.pause()
    print(f"Test loss {test_loss:.6f} accuracy {test_accuracy:.6f}")
    print("Training completed.")


if __name__ == "__main__":
    main()

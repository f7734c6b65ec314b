"""Train a tiny Keras model with a custom TensorFlow 2 training loop.

The model is trained eagerly with ``tf.GradientTape`` inside a
``@tf.function``-compiled training step, fed by a ``tf.data.Dataset`` built
from synthetic NumPy arrays. After every epoch the model is evaluated on a
held-out synthetic dataset. Seeds and threading are fixed for reproducibility.

Usage:
    python tf2_gradient_tape.py
"""

import numpy as np
import tensorflow as tf
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of tf2_gradient_tape.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.tf2_gradient_tape")

# ----------------------------------------------------------------------------
# Hyper-parameters and constants
# ----------------------------------------------------------------------------
SEED = 0
EPOCHS = 3
BATCH_SIZE = 16
LEARNING_RATE = 0.05
TRAIN_SAMPLES = 128
TEST_SAMPLES = 32
NUM_FEATURES = 8
HIDDEN_UNITS = 16

# Determinism: fixed seeds and single-threaded execution.
# Keras 3 draws default initializer seeds from Python's `random` module,
# so seed it too via keras.utils.set_random_seed (python, numpy and TF).
tf.keras.utils.set_random_seed(SEED)
np.random.seed(SEED)
tf.random.set_seed(SEED)
tf.config.experimental.enable_op_determinism()
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)


def make_dataset(num_samples, true_weights):
    """Build a batched dataset for a noisy linear regression problem."""
    features = np.random.rand(num_samples, NUM_FEATURES).astype(np.float32)
    noise = 0.01 * np.random.randn(num_samples, 1).astype(np.float32)
    labels = features @ true_weights + noise
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    return dataset.batch(BATCH_SIZE)


def build_model():
    """A small two-layer MLP."""
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(NUM_FEATURES,)),
            tf.keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )


model = build_model()
optimizer = tf.keras.optimizers.SGD(learning_rate=LEARNING_RATE)
loss_fn = tf.keras.losses.MeanSquaredError()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        predictions = model(x, training=True)
        loss = loss_fn(y, predictions)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def evaluate(model, dataset):
    """Return the mean loss of ``model`` over all batches of ``dataset``."""
    total_loss = 0.0
    num_batches = 0
    itt.task_begin(_autoitt_domain, "eval_loop")
    try:
        for x, y in dataset:
            itt.task_begin(_autoitt_domain, "eval")
            try:
                predictions = model(x, training=False)
                total_loss += float(loss_fn(y, predictions))
                num_batches += 1
            finally:
                itt.task_end(_autoitt_domain)
    finally:
        itt.task_end(_autoitt_domain)
    return total_loss / num_batches


def main():
    true_weights = np.random.rand(NUM_FEATURES, 1).astype(np.float32)
    train_dataset = make_dataset(TRAIN_SAMPLES, true_weights)
    test_dataset = make_dataset(TEST_SAMPLES, true_weights)

    itt.resume()
    itt.task_begin(_autoitt_domain, "epoch_loop")
    try:
        for epoch in range(EPOCHS):
            itt.task_begin(_autoitt_domain, "epoch")
            try:
                epoch_loss = 0.0
                num_steps = 0
                itt.task_begin(_autoitt_domain, "step_loop")
                try:
                    for step, (x, y) in enumerate(train_dataset):
                        itt.task_begin(_autoitt_domain, "step")
                        try:
                            loss = train_step(x, y)
                            epoch_loss += float(loss)
                            num_steps += 1
                        finally:
                            itt.task_end(_autoitt_domain)
                finally:
                    itt.task_end(_autoitt_domain)
                eval_loss = evaluate(model, test_dataset)
                print(
                    f"Epoch {epoch + 1}/{EPOCHS}: train loss {epoch_loss / num_steps:.6f} "
                    f"eval loss {eval_loss:.6f}"
                )
            finally:
                itt.task_end(_autoitt_domain)
    finally:
        itt.task_end(_autoitt_domain)
        itt.pause()

    print("Training completed.")


if __name__ == "__main__":
    main()

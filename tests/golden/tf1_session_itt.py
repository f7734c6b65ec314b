"""Train a single convolution layer with the TensorFlow 1.x graph/session API.

In the spirit of the oneAPI ``TensorFlow_HelloWorld.py`` sample: a graph with
placeholders, one ``tf.nn.conv2d`` + bias + ReLU layer and an MSE loss is
built, then trained with plain gradient descent inside a ``tf.Session``.
All data is synthetic and all seeds are fixed so runs are reproducible.

Usage:
    python tf1_session.py
"""

import numpy as np
import tensorflow.compat.v1 as tf
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of tf1_session.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.tf1_session")

tf.disable_v2_behavior()

# ----------------------------------------------------------------------------
# Hyper-parameters and constants
# ----------------------------------------------------------------------------
SEED = 0
EPOCHS = 5
STEPS = 10
LEARNING_RATE = 0.1
NUM_SAMPLES = 40
HEIGHT = 16
WIDTH = 16
IN_CHANNELS = 4
OUT_CHANNELS = 10
KERNEL_SIZE = 3

np.random.seed(SEED)
tf.set_random_seed(SEED)

# Synthetic input images and target feature maps.
x_batch = np.random.rand(NUM_SAMPLES, HEIGHT, WIDTH, IN_CHANNELS).astype(np.float32)
y_batch = np.random.rand(NUM_SAMPLES, HEIGHT, WIDTH, OUT_CHANNELS).astype(np.float32)

# ----------------------------------------------------------------------------
# Graph definition
# ----------------------------------------------------------------------------
x = tf.placeholder(tf.float32, shape=[None, HEIGHT, WIDTH, IN_CHANNELS], name="x")
y = tf.placeholder(tf.float32, shape=[None, HEIGHT, WIDTH, OUT_CHANNELS], name="y")

weights = tf.Variable(
    tf.random_normal(
        [KERNEL_SIZE, KERNEL_SIZE, IN_CHANNELS, OUT_CHANNELS], stddev=0.1, seed=SEED
    ),
    name="weights",
)
bias = tf.Variable(tf.zeros([OUT_CHANNELS]), name="bias")

conv = tf.nn.conv2d(x, weights, strides=[1, 1, 1, 1], padding="SAME")
output = tf.nn.relu(tf.nn.bias_add(conv, bias))

loss = tf.reduce_mean(tf.square(output - y))
train = tf.train.GradientDescentOptimizer(LEARNING_RATE).minimize(loss)

# Single-threaded session so results are bit-for-bit reproducible.
config = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
s = tf.Session(config=config)
s.run(tf.global_variables_initializer())


def main():
    itt.resume()
    itt.task_begin(_autoitt_domain, "epoch_loop")
    try:
        for epoch in range(EPOCHS):
            itt.task_begin(_autoitt_domain, "epoch")
            try:
                itt.task_begin(_autoitt_domain, "step_loop")
                try:
                    for step in range(STEPS):
                        itt.task_begin(_autoitt_domain, "step")
                        try:
                            s.run(train, feed_dict={x: x_batch, y: y_batch})
                        finally:
                            itt.task_end(_autoitt_domain)
                finally:
                    itt.task_end(_autoitt_domain)
                epoch_loss = s.run(loss, feed_dict={x: x_batch, y: y_batch})
                print(f"Epoch {epoch + 1}/{EPOCHS}: loss {epoch_loss:.6f}")
            finally:
                itt.task_end(_autoitt_domain)
    finally:
        itt.task_end(_autoitt_domain)
        itt.pause()

    s.close()
    print("[CODE_SAMPLE_COMPLETED_SUCCESSFULLY]")


if __name__ == "__main__":
    main()

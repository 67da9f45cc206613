"""Plain NumPy references shared by several test files."""

import numpy as np


def episode_stats(rewards, dones):
    """Per lane of ``[T, N]`` streams: the return and length of each episode at the step
    it ends (0 elsewhere), and the 1-based step count within the episode at every step."""
    T, N = rewards.shape
    ret = np.zeros((T, N), np.float64)
    length = np.zeros((T, N), np.int64)
    steps_in_episode = np.zeros((T, N), np.int64)
    for n in range(N):
        acc, k = 0.0, 0
        for t in range(T):
            acc += float(rewards[t, n])
            k += 1
            steps_in_episode[t, n] = k
            if dones[t, n]:
                ret[t, n], length[t, n] = acc, k
                acc, k = 0.0, 0
    return ret, length, steps_in_episode

"""The workflow around an algorithm's compiled program: the chunked runner (logs,
checkpoints, resuming, early stopping), sweeps and population-based training, devices and
hosts, run directories, saved runs, metrics, plots and the command line. It uses the
algorithms only through their records (:func:`jaxrl.algorithms.get`)."""

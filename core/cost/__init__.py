"""The cost model: will speculation pay on this machine, and which draft runs fastest (docs/cost.md).

    model.py    the maths: one step's cost from measured parts, E[accepted], predicted speedups, the shape grid
    store.py    a calibration's files: the machine, the key, the paths, what is cached (formats kept on disk)
    predict.py  what a calibration predicts: the cost model's Verdict of a method at a shape, read at a probe
    choose.py   the choices made from it: `--shape auto`, the run's prediction, the app's report, the switch's
                prior, and which GGUF arithmetic SPECLENS_GGUF_MATH=auto loads
    probe.py    timed passes and the probe of the moment that re-anchors a calibration
    measure.py  measuring a calibration: python -m core calibrate (main)
"""

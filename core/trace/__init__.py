"""The trace, the product of the one data path (engine -> trace -> app / CLI / bench):

    record.py  StepRecord, one per engine step, and the names its fields use (timers, stream sources)
    stats.py   every number derived from records (summarize, aggregate, the lossless verdict compare_to_ar)
    file.py    the JSON trace file {"meta", "records"} and the shipped example
    live.py    a run recorded as a trace: on the engine thread (LiveRun) or to the end (run_to_end)
"""

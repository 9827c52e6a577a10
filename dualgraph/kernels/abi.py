"""The binary interface the compiled entries and their callers agree on: where NumPy's array
struct keeps an array's data and dims, and the code that marks a job entry's signature.
``native.py`` (which loads and calls entries) and ``build.py`` (which writes them) both read
it, so neither imports the other for it.
"""
# A platform assumption: NumPy's array struct (PyArrayObject_fields, which NumPy's C API
# exposes) holds, after the 16-byte object header of a 64-bit CPython without debug
# fields, the data pointer, then the number of dims, then the pointer to the dims. The
# entries (``build.entry``) and ``memory.float32_vector`` read them there. It is checked
# against a real array before any entry is used (``array_struct_known``); where it does
# not hold, no native entry is loaded (loops run through Numba's dispatcher, which reads
# arrays its own way) and the grouped optimiser updates, which read their parameters by
# address, leave the work to NumPy (``optim/_ops.py``). ``tuning.report`` shows the check.
DATA_OFFSET, DIMS_OFFSET = 16, 32
# the first code of a job entry's signature (see ``build.entry``)
JOB = "job"

/* Produce's check, compiled: whether a RecordBatch's records (the bytes after its 61-byte
 * header, uncompressed) are exactly its count of plain records (mapping/connection/
 * kafka_record.h: a key or null, a value or null, no headers), which the pod then sends to
 * Redis whole for the streamadapter module to append (adapter/kafka/records.py,
 * decode_batches), without a Python object per record. Anything else is decoded as before.
 * tests/kafka/test_raw_produce.py checks the two paths store the same entries. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kafka_record.h"

static PyObject *plain_records(PyObject *self, PyObject *args) {
    Py_buffer data;
    long long count;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*L", &data, &count)) return NULL;
    int plain = kafka_plain_records((const unsigned char *)data.buf, (size_t)data.len, count);
    PyBuffer_Release(&data);
    return PyBool_FromLong(plain);
}

static PyMethodDef methods[] = {
    {"plain_records", plain_records, METH_VARARGS,
     "plain_records(records, count): whether the bytes are exactly count plain records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef produce_module = {
    PyModuleDef_HEAD_INIT, "_produce", "Produce's check of a RecordBatch's records.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__produce(void) { return PyModule_Create(&produce_module); }

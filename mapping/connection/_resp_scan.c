/* Where a RESP reply ends, without building it: the batcher's raw replies
 * (mapping/connection/raw_replies.py) are handed over as their bytes, so their end is found
 * by walking the element headers and skipping the bulk strings' bodies. Resumable: a reply
 * split across socket reads is scanned on from where the last complete element ended.
 * raw_replies.scan_pure is the same in Python (the tests check both). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_DEPTH 32 /* nested aggregates; a stream reply has 3 */

/* A decimal length after the type byte, "-1" allowed: 1 with *out, 0 not a number. */
static int parse_length(const char *text, Py_ssize_t size, long long *out) {
    int negative = 0;
    if (size > 0 && text[0] == '-') negative = 1, text++, size--;
    if (size < 1 || size > 18) return 0;
    long long value = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        if (text[i] < '0' || text[i] > '9') return 0;
        value = value * 10 + (text[i] - '0');
    }
    *out = negative ? -value : value;
    return 1;
}

static PyObject *protocol_error(const char *what, Py_ssize_t at) {
    PyErr_Format(PyExc_ValueError, "RESP protocol error: %s at byte %zd", what, at);
    return NULL;
}

/* scan(buffer, pos, pending, last) -> (pos, pending, last): see raw_replies.scan. */
static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, last;
    PyObject *pending_arg;
    if (!PyArg_ParseTuple(args, "y*nO!n", &view, &pos, &PyTuple_Type, &pending_arg, &last))
        return NULL;
    long long stack[MAX_DEPTH];
    Py_ssize_t depth = PyTuple_GET_SIZE(pending_arg);
    PyObject *result = NULL;
    if (depth > MAX_DEPTH) {
        PyErr_SetString(PyExc_ValueError, "RESP scan: pending too deep");
        goto out;
    }
    for (Py_ssize_t d = 0; d < depth; d++) {
        stack[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(pending_arg, d));
        if (stack[d] == -1 && PyErr_Occurred()) goto out;
    }
    const char *buf = view.buf;
    Py_ssize_t size = view.len;
    if (pos < 0 || pos > size) {
        PyErr_SetString(PyExc_ValueError, "RESP scan: position outside the buffer");
        goto out;
    }
    while (depth > 0) {
        if (stack[depth - 1] == 0) {
            depth--;
            continue;
        }
        if (pos >= size) break;
        /* a header line is a few bytes: a plain loop beats memchr's set-up */
        Py_ssize_t line_end = pos;
        while (line_end < size && buf[line_end] != '\n') line_end++;
        if (line_end == size) break; /* the header line is not all here yet */
        if (line_end - pos < 2 || buf[line_end - 1] != '\r') {
            result = protocol_error("a line without CRLF", pos);
            goto out;
        }
        char type = buf[pos];
        Py_ssize_t next = line_end + 1;
        long long children = 0;
        switch (type) {
        case '+': case '-': case ':': case '_': case ',': case '#': case '(':
            break;
        case '$': case '!': case '=': {
            long long length;
            if (!parse_length(buf + pos + 1, line_end - 1 - (pos + 1), &length) || length < -1) {
                result = protocol_error("a bad bulk length", pos);
                goto out;
            }
            if (length >= 0) {
                if (length + 2 > size - next) goto incomplete;
                if (buf[next + length] != '\r' || buf[next + length + 1] != '\n') {
                    result = protocol_error("a bulk string without CRLF", pos);
                    goto out;
                }
                next += (Py_ssize_t)length + 2;
            }
            break;
        }
        case '*': case '~': case '>': case '%': {
            if (!parse_length(buf + pos + 1, line_end - 1 - (pos + 1), &children) ||
                children < -1) {
                result = protocol_error("a bad aggregate length", pos);
                goto out;
            }
            if (children < 0) children = 0; /* a null array */
            if (type == '%') children *= 2;
            break;
        }
        default:
            result = protocol_error("an unknown reply type", pos);
            goto out;
        }
        if (depth == 2) last = pos; /* an element of the reply's own aggregate */
        stack[depth - 1]--;
        pos = next;
        if (children > 0) {
            if (depth == MAX_DEPTH) {
                result = protocol_error("aggregates nested too deep", pos);
                goto out;
            }
            stack[depth++] = children;
        }
    }
incomplete:;
    PyObject *pending = PyTuple_New(depth);
    if (pending == NULL) goto out;
    for (Py_ssize_t d = 0; d < depth; d++) {
        PyObject *count = PyLong_FromLongLong(stack[d]);
        if (count == NULL) {
            Py_DECREF(pending);
            goto out;
        }
        PyTuple_SET_ITEM(pending, d, count);
    }
    result = Py_BuildValue("(nNn)", pos, pending, last);
out:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, pos, pending, last) -> (pos, pending, last): RESP elements skipped."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "_resp_scan", "Where RESP replies end (the batcher's raw replies).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__resp_scan(void) { return PyModule_Create(&scan_module); }

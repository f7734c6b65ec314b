/* instrumenter._around: a callable that runs `begin()`, then the callable it wraps, then `end()`, with no Python
 * frame of its own.
 *
 * Why C: autoitt marks an optimizer's closure as a task (instrumenter/closures.py), and the closure runs the
 * user's forward and backward. A Python wrapper would be a frame between the optimizer and the user's code: in
 * every traceback the closure raises, in inspect.stack(), in faulthandler dumps. A call through a C type leaves
 * no frame, so the program sees what it sees without autoitt.
 *
 * Contract:
 *   Around(fn, begin, end)(*args, **kwargs) calls begin(), then fn(*args, **kwargs), then end(), and returns
 *   what fn returned or raises what fn raised, with its traceback untouched. An error in begin() or end() is
 *   swallowed: a marker that fails must never change the program's outcome. end() runs whether fn returned or
 *   raised (so a task begun is always ended on this thread, as ITT requires).
 *   Any attribute read on the wrapper is read on fn (a library that looks at its closure's attributes sees
 *   the closure's); repr() is fn's.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    PyObject *fn;
    PyObject *begin;
    PyObject *end;
    vectorcallfunc vectorcall;
} Around;

/* Calls `marker()`, swallowing what it raises, and leaves the error state as it found it (an exception from fn
   in flight stays in flight). */
static void call_marker(PyObject *marker)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *pending = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
#endif
    PyObject *result = PyObject_CallNoArgs(marker);
    if (result == NULL)
        PyErr_Clear();
    Py_XDECREF(result);
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(pending);
#else
    PyErr_Restore(type, value, traceback);
#endif
}

static PyObject *around_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Around *self = (Around *)callable;
    call_marker(self->begin);
    PyObject *result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    call_marker(self->end);
    return result;
}

static PyObject *around_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fn, *begin, *end;
    static char *names[] = {"fn", "begin", "end", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:Around", names, &fn, &begin, &end))
        return NULL;
    if (!PyCallable_Check(fn) || !PyCallable_Check(begin) || !PyCallable_Check(end)) {
        PyErr_SetString(PyExc_TypeError, "Around(fn, begin, end): all three must be callable");
        return NULL;
    }
    Around *self = (Around *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->fn = Py_NewRef(fn);
    self->begin = Py_NewRef(begin);
    self->end = Py_NewRef(end);
    self->vectorcall = around_vectorcall;
    return (PyObject *)self;
}

static int around_traverse(Around *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->begin);
    Py_VISIT(self->end);
    return 0;
}

static int around_clear(Around *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->begin);
    Py_CLEAR(self->end);
    return 0;
}

static void around_dealloc(Around *self)
{
    PyObject_GC_UnTrack(self);
    around_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *around_getattro(Around *self, PyObject *name)
{
    return PyObject_GetAttr(self->fn, name);
}

static PyObject *around_repr(Around *self)
{
    return PyObject_Repr(self->fn);
}

static PyTypeObject AroundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "instrumenter._around.Around",
    .tp_basicsize = sizeof(Around),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Around(fn, begin, end): calls begin(), fn(*args, **kwargs), end(); no Python frame of its own.",
    .tp_new = around_new,
    .tp_traverse = (traverseproc)around_traverse,
    .tp_clear = (inquiry)around_clear,
    .tp_dealloc = (destructor)around_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Around, vectorcall),
    .tp_getattro = (getattrofunc)around_getattro,
    .tp_repr = (reprfunc)around_repr,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "instrumenter._around",
    .m_doc = "A callable wrapper with no Python frame (see around.c).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__around(void)
{
    if (PyType_Ready(&AroundType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Around", (PyObject *)&AroundType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* instrumenter.runtime._around: a callable that runs `begin()`, then the callable it wraps, then `end()`, with no Python
 * frame of its own (Around); one that calls what it wraps with the arguments another function made (Rebound); and
 * one that calls what it wraps only where a check says so (Guarded).
 *
 * Why C: autoitt marks an optimizer's closure as a task (instrumenter/runtime/closures.py), and the closure runs the
 * user's forward and backward. A Python wrapper would be a frame between the optimizer and the user's code: in
 * every traceback the closure raises, in inspect.stack(), in faulthandler dumps. A call through a C type leaves
 * no frame, so the program sees what it sees without autoitt.
 *
 * Contract:
 *   Around(fn, begin, end)(*args, **kwargs) calls begin(), then fn(*args, **kwargs), then end(), and returns
 *   what fn returned or raises what fn raised, with its traceback untouched. An error of begin()'s or end()'s own
 *   is swallowed: a marker that fails must never change the program's outcome. An error that is the program's
 *   (a KeyboardInterrupt, or what its signal handler raised while a marker's Python ran: guest.h) is raised:
 *   from begin(), with fn not called; from end(), in place of fn's result or error (which becomes its context,
 *   as when a signal lands while an error unwinds). end() runs whether fn returned or raised, or begin() was
 *   interrupted (so a task begun is always ended on this thread, as ITT requires).
 *   Any attribute read on the wrapper is read on fn (a library that looks at its closure's attributes sees
 *   the closure's), except __wrapped__, which is fn (inspect.signature shows fn's); repr() is fn's.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#include "guest.h"

typedef struct {
    PyObject_HEAD
    PyObject *fn;
    PyObject *begin;
    PyObject *end;
    vectorcallfunc vectorcall;
} Around;

/* Calls `marker()`, swallowing what it raises of its own, and leaves the error state as it found it (an
   exception from fn in flight stays in flight). Returns the program's error where the marker raised one (taken,
   not set), else NULL. */
static PyObject *call_marker(PyObject *marker)
{
    PyObject *pending = guest_take_error(), *programs = NULL;
    PyObject *result = PyObject_CallNoArgs(marker);
    if (result == NULL && guest_keep_programs())
        programs = guest_take_error();
    Py_XDECREF(result);
    if (pending != NULL)
        guest_restore_error(pending);
    return programs;
}

static PyObject *around_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Around *self = (Around *)callable;
    PyObject *result = NULL, *programs = call_marker(self->begin);
    if (programs == NULL)
        result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    PyObject *at_end = call_marker(self->end);
    if (at_end != NULL) {
        if (programs != NULL)
            PyException_SetContext(at_end, programs); /* steals */
        programs = at_end;
    }
    if (programs == NULL)
        return result;
    if (result == NULL) {
        PyObject *fns = guest_take_error();
        if (fns != NULL)
            PyException_SetContext(programs, fns); /* steals */
    }
    Py_XDECREF(result);
    guest_restore_error(programs);
    return NULL;
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
    if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__wrapped__") == 0)
        return Py_NewRef(self->fn); /* inspect.signature shows fn's, as for a functools.wraps wrapper */
    return PyObject_GetAttr(self->fn, name);
}

static PyObject *around_repr(Around *self)
{
    return PyObject_Repr(self->fn);
}

static PyTypeObject AroundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "instrumenter.runtime._around.Around",
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

/* Rebound(fn, rebind)(*args, **kwargs): calls rebind(*args, **kwargs), which returns None (the call as it is) or
 * (args, kwargs), then fn with those, and returns what fn returned or raises what fn raised. Like Around, no Python
 * frame of its own is on the stack while fn runs: autoitt adds its Keras callback to a fit's callbacks this way
 * (instrumenter/runtime/libraries.py), and the user's callbacks, and what fit raises, see the stack they would see without
 * autoitt. An error of rebind's own, or a result of another shape, is swallowed: fn is called with the arguments
 * given. The program's error (guest.h) is raised, fn not called.
 * Attribute reads pass to fn, except __wrapped__, which is fn (inspect.signature shows fn's); repr() is fn's. */
typedef struct {
    PyObject_HEAD
    PyObject *fn;
    PyObject *rebind;
} Rebound;

static PyObject *rebound_call(Rebound *self, PyObject *args, PyObject *kwargs)
{
    PyObject *given = PyObject_Call(self->rebind, args, kwargs);
    if (given == NULL)
        return guest_keep_programs() ? NULL : PyObject_Call(self->fn, args, kwargs);
    PyObject *result;
    if (PyTuple_Check(given) && PyTuple_GET_SIZE(given) == 2 && PyTuple_Check(PyTuple_GET_ITEM(given, 0))
        && PyDict_Check(PyTuple_GET_ITEM(given, 1)))
        result = PyObject_Call(self->fn, PyTuple_GET_ITEM(given, 0), PyTuple_GET_ITEM(given, 1));
    else
        result = PyObject_Call(self->fn, args, kwargs);
    Py_DECREF(given);
    return result;
}

static PyObject *rebound_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fn, *rebind;
    static char *names[] = {"fn", "rebind", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:Rebound", names, &fn, &rebind))
        return NULL;
    if (!PyCallable_Check(fn) || !PyCallable_Check(rebind)) {
        PyErr_SetString(PyExc_TypeError, "Rebound(fn, rebind): both must be callable");
        return NULL;
    }
    Rebound *self = (Rebound *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->fn = Py_NewRef(fn);
    self->rebind = Py_NewRef(rebind);
    return (PyObject *)self;
}

static int rebound_traverse(Rebound *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->rebind);
    return 0;
}

static int rebound_clear(Rebound *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->rebind);
    return 0;
}

static void rebound_dealloc(Rebound *self)
{
    PyObject_GC_UnTrack(self);
    rebound_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *rebound_getattro(Rebound *self, PyObject *name)
{
    if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__wrapped__") == 0)
        return Py_NewRef(self->fn);
    return PyObject_GetAttr(self->fn, name);
}

static PyObject *rebound_repr(Rebound *self)
{
    return PyObject_Repr(self->fn);
}

static PyTypeObject ReboundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "instrumenter.runtime._around.Rebound",
    .tp_basicsize = sizeof(Rebound),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Rebound(fn, rebind): calls fn with the arguments rebind(*args, **kwargs) returns; no Python frame.",
    .tp_new = rebound_new,
    .tp_traverse = (traverseproc)rebound_traverse,
    .tp_clear = (inquiry)rebound_clear,
    .tp_dealloc = (destructor)rebound_dealloc,
    .tp_call = (ternaryfunc)rebound_call,
    .tp_getattro = (getattrofunc)rebound_getattro,
    .tp_repr = (reprfunc)rebound_repr,
};

/* Guarded(check, fn)(*args, **kwargs): calls check() and, where it returns true, fn(*args, **kwargs); else returns
 * None. autoitt's global optimizer step pre-hook is one (instrumenter/runtime/closures.py): PyTorch calls it at every
 * optimizer step, and where no profiler is on (most steps, with operators sampled) it costs a call into check (C)
 * and no Python frame. An error of check's or fn's own is swallowed and the result is None (the call as it is): a
 * hook that fails must never change the program's outcome. The program's error (guest.h) is raised. */
typedef struct {
    PyObject_HEAD
    PyObject *check;
    PyObject *fn;
    vectorcallfunc vectorcall;
} Guarded;

static PyObject *guarded_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Guarded *self = (Guarded *)callable;
    PyObject *on = PyObject_CallNoArgs(self->check);
    int yes = on != NULL ? PyObject_IsTrue(on) : -1;
    Py_XDECREF(on);
    PyObject *result = NULL;
    if (yes > 0)
        result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    if (result == NULL) {
        if (guest_keep_programs())
            return NULL;
        Py_RETURN_NONE;
    }
    return result;
}

static PyObject *guarded_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *check, *fn;
    static char *names[] = {"check", "fn", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:Guarded", names, &check, &fn))
        return NULL;
    if (!PyCallable_Check(check) || !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "Guarded(check, fn): both must be callable");
        return NULL;
    }
    Guarded *self = (Guarded *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->check = Py_NewRef(check);
    self->fn = Py_NewRef(fn);
    self->vectorcall = guarded_vectorcall;
    return (PyObject *)self;
}

static int guarded_traverse(Guarded *self, visitproc visit, void *arg)
{
    Py_VISIT(self->check);
    Py_VISIT(self->fn);
    return 0;
}

static int guarded_clear(Guarded *self)
{
    Py_CLEAR(self->check);
    Py_CLEAR(self->fn);
    return 0;
}

static void guarded_dealloc(Guarded *self)
{
    PyObject_GC_UnTrack(self);
    guarded_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject GuardedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "instrumenter.runtime._around.Guarded",
    .tp_basicsize = sizeof(Guarded),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Guarded(check, fn): fn(*args, **kwargs) where check() is true, else None; no Python frame.",
    .tp_new = guarded_new,
    .tp_traverse = (traverseproc)guarded_traverse,
    .tp_clear = (inquiry)guarded_clear,
    .tp_dealloc = (destructor)guarded_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Guarded, vectorcall),
};

static PyMethodDef module_methods[] = {
    GUEST_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "instrumenter.runtime._around",
    .m_methods = module_methods,
    .m_doc = "Callable wrappers with no Python frame (see around.c).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__around(void)
{
    if (PyType_Ready(&AroundType) < 0 || PyType_Ready(&ReboundType) < 0 || PyType_Ready(&GuardedType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Around", (PyObject *)&AroundType) < 0
        || PyModule_AddObjectRef(m, "Rebound", (PyObject *)&ReboundType) < 0
        || PyModule_AddObjectRef(m, "Guarded", (PyObject *)&GuardedType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

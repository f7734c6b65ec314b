/* instrumenter.runtime._markers: an instrumented copy's task_begin and task_end, with no Python frame of their own.
 *
 * Why C: every step of a copy runs `itt.task_begin(domain, "step")` and `itt.task_end(domain)`, between a step's
 * worth of the framework's own code. As Python functions (instrumenter/runtime/collection.py and the operator
 * toggle, instrumenter/runtime/torch_ops.py) the pair made four Python calls a step, and each costs far more
 * there than in a loop, its code out of the CPU's caches: about 4 µs a step on the conv sample
 * (benchmarks/bench_step_parts.py). And a frame of autoitt's is one the program can see: a Ctrl-C that lands
 * while a marker runs raised KeyboardInterrupt inside it, and the traceback showed autoitt's line under the
 * user's. Here the pair is two calls into C, which calls only C (ittapi.native's functions, dict and iterator
 * operations): no bytecode of autoitt's runs, so pending signals are handled in the user's own frame.
 *
 * Contract (Markers(native, handles, toggle)):
 *   task_begin(domain, name): begins a task `name` on `domain` through native.task_begin with the one string
 *     handle of `name` (made with native.StringHandle once, kept in `handles`, a dict every copy in the process
 *     shares), then, with a toggle, counts the iteration (toggle._counters[name], an iterator of 1, 2, ...) and
 *     asks toggle.begin_numbered(name, number) only where it may matter: where some thread is inside an
 *     iteration recording operators (toggle.entered_threads), or where the number is not turned down by the
 *     rule's moduli (toggle.fast_reject's four ints: every, until, later, ranges_end).
 *   task_end(domain): with a toggle where some thread is inside a recorded iteration, toggle.end(); then
 *     native.task_end(domain).
 *   native's functions are looked up on it at every call, so that a test (or a profiler) may wrap them. Where
 *   they are still ittapi's own and the arguments are exactly its Domain and StringHandle, the markers call
 *   ITT's function pointers themselves (the direct path, below): what native's functions would do, without
 *   their argument parsing. An error from native's functions is raised as they raise it (as ittapi.compat's
 *   own markers would), marked as the markers' (the attribute `_autoitt_marker`, which the launcher reads to
 *   say the error is autoitt's: no frame of autoitt's is in its traceback to tell); the toggle's own errors are
 *   swallowed (it swallows its own too: a marker that fails must not change what the program does), and an
 *   error that is the program's, a KeyboardInterrupt or whatever its signal handler raised while the toggle's
 *   Python ran, is raised from the marker as it came (guest.h). A task_end that raises one ends its task first.
 *   direct: whether the direct path was found (read-only; where it was not, every call takes native's
 *   functions).
 *
 * The direct path. ittapi.native's task_begin is a METH_VARARGS function: a tuple, PyArg_ParseTuple, two type
 * checks, then __itt_task_begin(domain->handle, __itt_null, __itt_null, handle->handle) (ittapi's task.cpp).
 * Between two steps of a framework, out of the CPU's caches, the pair of calls costs a conv step about 2 µs
 * more than the ITT calls themselves (benchmarks/README.md, "The markers' direct path"). ITT's static part in
 * ittapi's extension exports the pointers those macros call through (__itt_task_begin_ptr__3_0, ...: data
 * symbols), so the markers read the same pointers and call them as ittnotify.h's macros do: no call where the
 * domain is NULL or disabled (its flags 0) or the pointer is NULL (no collector). The pointers are read at every
 * call, never kept: ITT sets them at its initialisation (to a collector's functions, or to NULL).
 *   Taken only where everything is as ittapi lays it out, else native's functions are called:
 *   - found once, at construction: `native` is a module whose shared object (dlopen RTLD_NOLOAD: the one loaded)
 *     exports both pointers; its task_begin and task_end are its own builtins; its Domain and StringHandle are
 *     types of exactly the size of ittapi's structs (domain.hpp, string_handle.hpp: the object's head, a
 *     PyObject*, then the ITT pointer; unchanged since ittapi's Python binding
 *     was written) and cannot be subclassed.
 *   - checked at every call: the module's task_begin (task_end) is still that builtin (a dict lookup: a wrapper
 *     installed since is called), and the arguments' types are exactly Domain and StringHandle (anything else
 *     goes to native's function, which raises as it raises).
 *   The library handle is kept for the life of the object, so the pointers' addresses stay mapped.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "guest.h"

/* ITT's ABI as ittnotify.h has it (x86-64 and aarch64 Linux: the default calling convention). */
typedef struct {
    unsigned long long d1, d2, d3;
} itt_id;
typedef struct {
    volatile int flags; /* __itt_domain's first field: non-zero where the domain is enabled */
} itt_domain_head;
typedef void (*itt_task_begin_fn)(const itt_domain_head *, itt_id, itt_id, void *);
typedef void (*itt_task_end_fn)(const itt_domain_head *);

/* ittapi.native's objects (ittapi's domain.hpp and string_handle.hpp) */
typedef struct {
    PyObject_HEAD
    PyObject *name;
    itt_domain_head *handle;
} NativeDomain;
typedef struct {
    PyObject_HEAD
    PyObject *str;
    void *handle;
} NativeStringHandle;

/* The direct path's facts, found once by find_direct(); begin == NULL: no direct path. */
typedef struct {
    itt_task_begin_fn *begin;  /* ittapi's __itt_task_begin_ptr__3_0: read at every call */
    itt_task_end_fn *end;
    void *library;             /* dlopen's handle on ittapi's extension, kept so the pointers stay mapped */
    PyObject *dict;            /* the module's dict */
    PyObject *native_begin;    /* the module's own task_begin and task_end builtins */
    PyObject *native_end;
    PyTypeObject *domain_type; /* ittapi.native.Domain, StringHandle */
    PyTypeObject *handle_type;
} Direct;

typedef struct {
    PyObject_HEAD
    PyObject *native;  /* ittapi.native */
    PyObject *handles; /* dict: name -> StringHandle */
    PyObject *toggle;  /* OperatorToggle or NULL */
    /* the toggle's rule moduli, read once (its policy is frozen) */
    long every, until, later, ranges_end;
    Direct direct;
} Markers;

static PyObject *s_task_begin, *s_task_end, *s_string_handle, *s_counters, *s_entered_threads, *s_begin_numbered,
    *s_end, *s_domain;

/* Whether the module's `attribute` is still `original` (no wrapper installed since construction). */
static int still_native(const Direct *direct, PyObject *attribute, PyObject *original)
{
    PyObject *now = PyDict_GetItemWithError(direct->dict, attribute); /* borrowed */
    if (now == NULL)
        PyErr_Clear(); /* the call through the module raises what it raises */
    return now == original;
}

/* The type `name` of the module's dict, where it is exactly `size` bytes, of no items, and final; else NULL. */
static PyTypeObject *native_type(PyObject *dict, PyObject *name, Py_ssize_t size)
{
    PyObject *type = PyDict_GetItemWithError(dict, name); /* borrowed */
    if (type == NULL || !PyType_CheckExact(type))
        return NULL;
    PyTypeObject *t = (PyTypeObject *)type;
    if (t->tp_basicsize != size || t->tp_itemsize != 0 || PyType_HasFeature(t, Py_TPFLAGS_BASETYPE))
        return NULL;
    return (PyTypeObject *)Py_NewRef(type);
}

/* The module's builtin `name` where it is its own (a C function bound to the module, of that name); else NULL. */
static PyObject *native_function(PyObject *module, PyObject *dict, PyObject *name)
{
    PyObject *function = PyDict_GetItemWithError(dict, name); /* borrowed */
    if (function == NULL || !PyCFunction_Check(function) || PyCFunction_GET_SELF(function) != module)
        return NULL;
    const char *called = ((PyCFunctionObject *)function)->m_ml->ml_name, *wanted = PyUnicode_AsUTF8(name);
    if (called == NULL || wanted == NULL || strcmp(called, wanted) != 0)
        return NULL;
    return Py_NewRef(function);
}

static void forget_direct(Direct *direct)
{
    Py_CLEAR(direct->dict);
    Py_CLEAR(direct->native_begin);
    Py_CLEAR(direct->native_end);
    Py_CLEAR(direct->domain_type);
    Py_CLEAR(direct->handle_type);
    if (direct->library != NULL)
        dlclose(direct->library);
    memset(direct, 0, sizeof *direct);
}

/* Finds the direct path on `module` (ittapi.native), or leaves `direct` empty: never an error. */
static void find_direct(Direct *direct, PyObject *module)
{
    memset(direct, 0, sizeof *direct);
    if (!PyModule_Check(module))
        return;
    PyObject *file = PyModule_GetFilenameObject(module), *path = NULL;
    if (file == NULL || !PyUnicode_FSConverter(file, &path)) {
        Py_XDECREF(file);
        PyErr_Clear();
        return;
    }
    Py_DECREF(file);
    /* RTLD_NOLOAD: the library already loaded as this module, or nothing (a module not from a shared object) */
    direct->library = dlopen(PyBytes_AS_STRING(path), RTLD_NOW | RTLD_NOLOAD);
    Py_DECREF(path);
    if (direct->library == NULL)
        return;
    direct->begin = (itt_task_begin_fn *)dlsym(direct->library, "__itt_task_begin_ptr__3_0");
    direct->end = (itt_task_end_fn *)dlsym(direct->library, "__itt_task_end_ptr__3_0");
    direct->dict = Py_NewRef(PyModule_GetDict(module));
    direct->native_begin = native_function(module, direct->dict, s_task_begin);
    direct->native_end = native_function(module, direct->dict, s_task_end);
    direct->domain_type = native_type(direct->dict, s_domain, sizeof(NativeDomain));
    direct->handle_type = native_type(direct->dict, s_string_handle, sizeof(NativeStringHandle));
    if (PyErr_Occurred())
        PyErr_Clear();
    if (direct->begin == NULL || direct->end == NULL || direct->native_begin == NULL || direct->native_end == NULL
        || direct->domain_type == NULL || direct->handle_type == NULL)
        forget_direct(direct);
}

/* Calls the toggle's `method` (args[0] is the toggle), swallowing its own error: -1 where the program's is left
   set (guest.h), else 0. */
static int toggle_call(PyObject *method, PyObject *const *args, size_t nargs)
{
    PyObject *result = PyObject_VectorcallMethod(method, args, nargs | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(result);
    return result == NULL && guest_keep_programs() ? -1 : 0;
}

/* Whether some thread is inside an iteration recording its operators (then the toggle's bookkeeping must see
   every task): toggle.entered_threads != 0. An attribute that cannot be read counts as yes (the slow path is
   always right); -1 where reading it raised the program's error (left set). */
static int someone_entered(PyObject *toggle)
{
    PyObject *value = PyObject_GetAttr(toggle, s_entered_threads);
    int yes = value != NULL ? PyObject_IsTrue(value) : -1;
    Py_XDECREF(value);
    if (yes < 0)
        return guest_keep_programs() ? -1 : 1;
    return yes;
}

/* Counts iteration `name` on the toggle: its number (1-based), 0 where the toggle does not sample `name`, -1 on
   an error of its own (swallowed), -2 on the program's (left set). */
static long count_iteration(PyObject *toggle, PyObject *name)
{
    PyObject *counters = PyObject_GetAttr(toggle, s_counters);
    if (counters == NULL)
        return guest_keep_programs() ? -2 : -1;
    long number = 0;
    PyObject *counter = PyDict_Check(counters) ? PyDict_GetItemWithError(counters, name) : NULL; /* borrowed */
    if (counter != NULL) {
        PyObject *next = PyIter_Next(counter);
        number = next != NULL ? PyLong_AsLong(next) : -1;
        Py_XDECREF(next);
    }
    if (PyErr_Occurred())
        number = guest_keep_programs() ? -2 : -1;
    Py_DECREF(counters);
    return number;
}

/* The error in flight was raised by the markers (not by the program): says so on the exception, as the attribute
   `_autoitt_marker` the launcher reads (instrumenter/launch/__main__.py, _autoitt_fault), since no frame of
   autoitt's is in its traceback to tell. Returns NULL, for `return fault();`. */
static PyObject *fault(void)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL; /* a KeyboardInterrupt that landed while native's function ran: the program's, unmarked */
    PyObject *raised = guest_take_error();
    if (raised != NULL && PyObject_SetAttrString(raised, "_autoitt_marker", Py_True) < 0)
        PyErr_Clear(); /* an exception that takes no attribute: raised as it is */
    if (raised != NULL)
        guest_restore_error(raised);
    return NULL;
}

static PyObject *markers_task_begin(Markers *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "task_begin(domain, name): name must be a str");
        return fault();
    }
    PyObject *domain = args[0], *name = args[1];
    PyObject *handle = PyDict_GetItemWithError(self->handles, name); /* borrowed */
    if (handle == NULL) {
        if (PyErr_Occurred())
            return fault();
        PyObject *made = PyObject_CallMethodOneArg(self->native, s_string_handle, name);
        if (made == NULL)
            return fault();
        handle = PyDict_SetDefault(self->handles, name, made); /* borrowed: the first one made, on a race */
        Py_DECREF(made);
        if (handle == NULL)
            return fault();
    }
    const Direct *direct = &self->direct;
    if (direct->begin != NULL && Py_TYPE(domain) == direct->domain_type && Py_TYPE(handle) == direct->handle_type
        && still_native(direct, s_task_begin, direct->native_begin)) {
        /* ittapi's task_begin(domain, handle), as its __itt_task_begin macro calls (ittnotify.h) */
        itt_domain_head *d = ((NativeDomain *)domain)->handle;
        itt_task_begin_fn begin = *direct->begin;
        if (d != NULL && d->flags && begin != NULL) {
            const itt_id null = {0, 0, 0};
            begin(d, null, null, ((NativeStringHandle *)handle)->handle);
        }
    } else {
        Py_INCREF(handle); /* the dict may be changed by the call below */
        PyObject *call[3] = {self->native, domain, handle};
        PyObject *result = PyObject_VectorcallMethod(s_task_begin, call, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(handle);
        if (result == NULL)
            return fault();
        Py_DECREF(result);
    }
    if (self->toggle == NULL)
        Py_RETURN_NONE;
    /* after the task began: the operators are the iteration's children */
    long number = count_iteration(self->toggle, name);
    if (number == -2)
        return NULL; /* the program's error: the task began, and the program's own handling ends it or not */
    if (number < 0)
        Py_RETURN_NONE;
    int entered = someone_entered(self->toggle);
    if (entered < 0)
        return NULL;
    if (!entered
        && (number == 0
            || ((number % (number <= self->until ? self->every : self->later)) && number > self->ranges_end)))
        Py_RETURN_NONE; /* most steps: recorded by nobody, and not one the rule picks */
    PyObject *numbered = PyLong_FromLong(number);
    if (numbered == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *targs[3] = {self->toggle, name, numbered};
    int kept = toggle_call(s_begin_numbered, targs, 3);
    Py_DECREF(numbered);
    if (kept < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *markers_task_end(Markers *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "task_end(domain)");
        return fault();
    }
    /* The program's error, raised by the toggle's Python: held while the task ends (ITT ends a thread's tasks in
       order, so one left open would take the next end), then raised. */
    PyObject *programs = NULL;
    if (self->toggle != NULL) {
        int entered = someone_entered(self->toggle);
        if (entered > 0) {
            PyObject *targs[1] = {self->toggle};
            entered = toggle_call(s_end, targs, 1);
        }
        if (entered < 0)
            programs = guest_take_error();
    }
    const Direct *direct = &self->direct;
    PyObject *result;
    if (direct->end != NULL && Py_TYPE(args[0]) == direct->domain_type
        && still_native(direct, s_task_end, direct->native_end)) {
        /* ittapi's task_end(domain), as its __itt_task_end macro calls */
        itt_domain_head *d = ((NativeDomain *)args[0])->handle;
        itt_task_end_fn end = *direct->end;
        if (d != NULL && d->flags && end != NULL)
            end(d);
        result = Py_NewRef(Py_None);
    } else {
        PyObject *call[2] = {self->native, args[0]};
        result = PyObject_VectorcallMethod(s_task_end, call, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (result == NULL && programs == NULL)
            return fault();
    }
    if (programs == NULL)
        return result;
    Py_XDECREF(result);
    PyErr_Clear(); /* native's error, if any, gives way to the program's */
    guest_restore_error(programs);
    return NULL;
}

static int read_long(PyObject *from, const char *field, long *out)
{
    PyObject *value = PyObject_GetAttrString(from, field);
    if (value == NULL)
        return -1;
    *out = PyLong_AsLong(value);
    Py_DECREF(value);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *markers_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *native, *handles, *toggle;
    static char *names[] = {"native", "handles", "toggle", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O:Markers", names, &native, &PyDict_Type, &handles, &toggle))
        return NULL;
    Markers *self = (Markers *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->native = Py_NewRef(native);
    self->handles = Py_NewRef(handles);
    find_direct(&self->direct, native);
    if (toggle != Py_None) {
        self->toggle = Py_NewRef(toggle);
        PyObject *moduli = PyObject_GetAttrString(toggle, "fast_reject");
        if (moduli == NULL || read_long(moduli, "every", &self->every) < 0 || read_long(moduli, "until", &self->until) < 0
            || read_long(moduli, "later", &self->later) < 0 || read_long(moduli, "ranges_end", &self->ranges_end) < 0) {
            Py_XDECREF(moduli);
            Py_DECREF(self);
            return NULL;
        }
        Py_DECREF(moduli);
        if (self->every < 1 || self->later < 1) {
            PyErr_SetString(PyExc_ValueError, "Markers: the toggle's every and later must be >= 1");
            Py_DECREF(self);
            return NULL;
        }
    }
    return (PyObject *)self;
}

static int markers_traverse(Markers *self, visitproc visit, void *arg)
{
    Py_VISIT(self->native);
    Py_VISIT(self->handles);
    Py_VISIT(self->toggle);
    Py_VISIT(self->direct.dict);
    Py_VISIT(self->direct.native_begin);
    Py_VISIT(self->direct.native_end);
    Py_VISIT(self->direct.domain_type);
    Py_VISIT(self->direct.handle_type);
    return 0;
}

static int markers_clear(Markers *self)
{
    Py_CLEAR(self->native);
    Py_CLEAR(self->handles);
    Py_CLEAR(self->toggle);
    forget_direct(&self->direct);
    return 0;
}

static void markers_dealloc(Markers *self)
{
    PyObject_GC_UnTrack(self);
    markers_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef markers_methods[] = {
    {"task_begin", (PyCFunction)(void (*)(void))markers_task_begin, METH_FASTCALL,
     "task_begin(domain, name): a task with name's one string handle; counts the iteration for the toggle."},
    {"task_end", (PyCFunction)(void (*)(void))markers_task_end, METH_FASTCALL,
     "task_end(domain): ends this thread's innermost task on domain (and the toggle's iteration)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *markers_direct(Markers *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->direct.begin != NULL);
}

static PyGetSetDef markers_getset[] = {
    {"direct", (getter)markers_direct, NULL,
     "Whether the markers call ITT's pointers themselves where ittapi's functions are unwrapped (markers.c).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject MarkersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "instrumenter.runtime._markers.Markers",
    .tp_basicsize = sizeof(Markers),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Markers(native, handles, toggle): a copy's task_begin/task_end with no Python frame (markers.c).",
    .tp_new = markers_new,
    .tp_traverse = (traverseproc)markers_traverse,
    .tp_clear = (inquiry)markers_clear,
    .tp_dealloc = (destructor)markers_dealloc,
    .tp_methods = markers_methods,
    .tp_getset = markers_getset,
};

static PyMethodDef module_methods[] = {
    GUEST_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "instrumenter.runtime._markers",
    .m_methods = module_methods,
    .m_doc = "A copy's step markers with no Python frame (see markers.c).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__markers(void)
{
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_task_begin, "task_begin"}, {&s_task_end, "task_end"}, {&s_string_handle, "StringHandle"},
        {&s_counters, "_counters"}, {&s_entered_threads, "entered_threads"}, {&s_begin_numbered, "begin_numbered"},
        {&s_end, "end"}, {&s_domain, "Domain"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (*names[i].slot == NULL && (*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    if (PyType_Ready(&MarkersType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Markers", (PyObject *)&MarkersType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

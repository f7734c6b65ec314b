/* guest.h: whose an error is, for the C callbacks autoitt runs in the program's process (markers.c, around.c).
 *
 * The rule (instrumenter/runtime/guest.py has it in full): an error of autoitt's own is swallowed, so a marker that
 * fails never changes what the program does; an error that is the program's, a KeyboardInterrupt, a SystemExit or
 * anything the program's signal handler raised while autoitt's Python code ran, is left set and returned to the
 * program as its own code would have raised it. A bare PyErr_Clear() after a call that can run bytecode breaks it:
 * Ctrl-C was lost that way (issue 40).
 *
 * One copy per translation unit (static). Each module built with it has set_programs(fn) (GUEST_METHOD), through which
 * instrumenter/runtime/extensions.py hands it guest.programs as it loads it: in a copy's process the runtime's package
 * is the launcher's _autoitt, not instrumenter.runtime, so the check is never imported by name. Before it is handed
 * over, only the first half of the rule holds (what is not an Exception is the program's).
 */
#ifndef AUTOITT_GUEST_H
#define AUTOITT_GUEST_H

#include <Python.h>

static PyObject *guest_programs_fn; /* guest.programs, handed over by set_programs */

static PyObject *guest_set_programs(PyObject *module, PyObject *fn)
{
    (void)module;
    PyObject *old = guest_programs_fn;
    guest_programs_fn = Py_NewRef(fn);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

#define GUEST_METHOD                                                                                                   \
    {"set_programs", (PyCFunction)guest_set_programs, METH_O,                                                         \
     "set_programs(fn): fn(error) says whether an Exception caught in a callback is the program's (guest.h)."}

/* The error set, taken (none left set): the exception object, its traceback on it; NULL where none was set. */
static inline PyObject *guest_take_error(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value != NULL && traceback != NULL)
        PyException_SetTraceback(value, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
#endif
}

/* Sets `raised` (taken by guest_take_error; the reference is stolen) as the error in flight. */
static inline void guest_restore_error(PyObject *raised)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(raised);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(raised)), raised, PyException_GetTraceback(raised));
#endif
}

/* Where an error is set: 1 if it is the program's (left set), 0 if it was autoitt's (cleared). No error set: 0. */
static int guest_keep_programs(void)
{
    if (!PyErr_Occurred())
        return 0;
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return 1; /* KeyboardInterrupt, SystemExit, GeneratorExit: never autoitt's to take */
    PyObject *raised = guest_take_error();
    if (raised == NULL)
        return 0;
    PyObject *answer = guest_programs_fn != NULL ? PyObject_CallOneArg(guest_programs_fn, raised) : NULL;
    int yes = answer != NULL ? PyObject_IsTrue(answer) : 0;
    Py_XDECREF(answer);
    if (PyErr_Occurred()) {
        /* the check itself was interrupted: what interrupted it is the program's if anything is */
        Py_DECREF(raised);
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return 1;
        PyErr_Clear();
        return 0;
    }
    if (yes > 0) {
        guest_restore_error(raised);
        return 1;
    }
    Py_DECREF(raised);
    return 0;
}

#endif

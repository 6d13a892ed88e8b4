//! The sandboxed Lua 5.1 a customization runs in: a fresh state per call with only the
//! base, string, table and math libraries; no `io`, `os`, `debug`, `package`, `coroutine`,
//! no loading of code or bytecode (`load`, `loadstring`, `dofile`, `loadfile`,
//! `string.dump`), no metatable or raw access (the functions Karmada's Lua VM disables);
//! `require` knows only `"kube"`. A memory limit, an instruction limit and a wall-clock
//! timeout (checked every [`HOOK_EVERY`] instructions) stop a runaway script; `pcall` and
//! `xpcall` cannot swallow those stops. The hook never fires inside a C function: the one
//! C code a script can make run long, pattern matching, is bounded before it runs
//! ([`crate::patterns`]).

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use mlua::{
    ChunkMode, Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Value as LuaValue,
    VmState,
};

/// How often (in VM instructions) the hook checks the instruction budget and the clock.
pub const HOOK_EVERY: u32 = 1_000;

/// Deepest nesting of `pcall`/`xpcall` (each is a native call).
const MAX_PCALL_DEPTH: usize = 32;

/// The bounds of one call of a customization's function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes the Lua state may allocate (the template's copy included).
    pub memory_bytes: usize,
    /// VM instructions for loading the script and running the function.
    pub instructions: u64,
    /// Wall-clock bound (Karmada's own is 1 s).
    pub timeout: Duration,
}

impl Default for Limits {
    /// 32 MiB, 10 million instructions, 1 s.
    fn default() -> Self {
        Limits {
            memory_bytes: 32 << 20,
            instructions: 10_000_000,
            timeout: Duration::from_secs(1),
        }
    }
}

/// Why a script was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The instruction budget ran out.
    Instructions(u64),
    /// The wall clock ran out.
    Timeout(Duration),
    /// An allocation went past the memory limit.
    Memory(usize),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Instructions(n) => write!(f, "stopped: more than {n} Lua instructions"),
            Stop::Timeout(t) => write!(f, "stopped: ran longer than {t:?}"),
            Stop::Memory(b) => write!(f, "stopped: allocated more than {b} bytes"),
        }
    }
}

/// A fresh sandboxed state and the record of why it was stopped, if it was.
pub struct Sandbox {
    /// The state.
    pub lua: Lua,
    stop: Rc<Cell<Option<Stop>>>,
    limits: Limits,
}

/// The globals Karmada's VM replaces by an error, plus what this sandbox never loads.
const DISABLED: &[&str] = &[
    "collectgarbage",
    "dofile",
    "getfenv",
    "getmetatable",
    "load",
    "loadfile",
    "loadstring",
    "rawequal",
    "rawget",
    "rawset",
    "setfenv",
    "setmetatable",
    "module",
    "newproxy",
    "gcinfo",
];

impl Sandbox {
    /// A new state with the libraries, `require("kube")` and the limits in place.
    pub fn new(limits: Limits) -> mlua::Result<Sandbox> {
        let lua = Lua::new_with(
            StdLib::STRING | StdLib::TABLE | StdLib::MATH,
            LuaOptions::default(),
        )?;
        let stop: Rc<Cell<Option<Stop>>> = Rc::new(Cell::new(None));
        let g = lua.globals();
        for name in DISABLED {
            let owned = (*name).to_owned();
            g.raw_set(
                *name,
                lua.create_function(move |_, _: MultiValue| -> mlua::Result<()> {
                    Err(mlua::Error::runtime(format!(
                        "{owned} is not available in the karmada-quota sandbox"
                    )))
                })?,
            )?;
        }
        // Lua 5.1's base library opens `coroutine`: a coroutine is a thread the hook may
        // not follow; not offered (Karmada's VM does not open it either).
        g.raw_set("coroutine", LuaValue::Nil)?;
        g.raw_set("print", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
        let string: mlua::Table = g.raw_get("string")?;
        string.raw_set("dump", LuaValue::Nil)?;
        crate::patterns::install(&lua, &string)?;
        let kube = crate::kube::library(&lua)?;
        g.raw_set(
            "require",
            lua.create_function(move |_, name: String| {
                if name == "kube" {
                    Ok(kube.clone())
                } else {
                    Err(mlua::Error::runtime(format!(
                        "module {name:?} is not available: the karmada-quota sandbox offers only \"kube\""
                    )))
                }
            })?,
        )?;
        install_pcall(&lua, &stop)?;
        let started = Instant::now();
        let executed = Cell::new(0u64);
        let hook_stop = stop.clone();
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| {
                let n = executed.get() + u64::from(HOOK_EVERY);
                executed.set(n);
                let why = if n > limits.instructions {
                    Some(Stop::Instructions(limits.instructions))
                } else if started.elapsed() > limits.timeout {
                    Some(Stop::Timeout(limits.timeout))
                } else {
                    hook_stop.get()
                };
                match why {
                    Some(why) => {
                        hook_stop.set(Some(why));
                        Err(mlua::Error::runtime(why.to_string()))
                    }
                    None => Ok(VmState::Continue),
                }
            },
        )?;
        lua.set_memory_limit(limits.memory_bytes)?;
        Ok(Sandbox { lua, stop, limits })
    }

    /// Run `script` (text only, never bytecode), then call its global function `function`
    /// with `args`. `Err` is a message: the stop when the limits stopped it, else Lua's.
    pub fn call(
        &self,
        script: &str,
        chunk_name: &str,
        function: &str,
        args: MultiValue,
    ) -> Result<MultiValue, String> {
        let result = self
            .lua
            .load(script)
            .set_name(format!("={chunk_name}"))
            .set_mode(ChunkMode::Text)
            .exec()
            .map_err(|e| self.message(&e))
            .and_then(|()| {
                match self
                    .lua
                    .globals()
                    .raw_get::<LuaValue>(function)
                    .map_err(|e| e.to_string())?
                {
                    LuaValue::Function(f) => Ok(f),
                    LuaValue::Nil => Err(format!("the script defines no function {function}")),
                    other => Err(format!(
                        "{function} is a {}, not a function",
                        other.type_name()
                    )),
                }
            })?;
        result
            .call::<MultiValue>(args)
            .map_err(|e| self.message(&e))
    }

    /// The message of a failed run: why the limits stopped it, else Lua's error.
    fn message(&self, e: &mlua::Error) -> String {
        if let Some(stop) = self.stop.get() {
            return stop.to_string();
        }
        if is_memory(e) {
            self.stop.set(Some(Stop::Memory(self.limits.memory_bytes)));
            return Stop::Memory(self.limits.memory_bytes).to_string();
        }
        innermost(e)
    }
}

fn is_memory(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory(cause),
        mlua::Error::WithContext { cause, .. } => is_memory(cause),
        _ => false,
    }
}

/// Lua's message without the tracebacks of nested native calls.
fn innermost(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => innermost(cause),
        mlua::Error::WithContext { cause, .. } => innermost(cause),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::SyntaxError { message, .. } => format!("syntax error: {message}"),
        other => other.to_string(),
    }
}

/// `pcall` and `xpcall` that let the script catch its own errors but not a stop.
fn install_pcall(lua: &Lua, stop: &Rc<Cell<Option<Stop>>>) -> mlua::Result<()> {
    let depth = Rc::new(Cell::new(0usize));
    let protected = {
        let stop = stop.clone();
        move |f: &Function, args: MultiValue| -> mlua::Result<Result<MultiValue, String>> {
            if depth.get() >= MAX_PCALL_DEPTH {
                return Err(mlua::Error::runtime(format!(
                    "pcall nested deeper than {MAX_PCALL_DEPTH}"
                )));
            }
            depth.set(depth.get() + 1);
            let result = f.call::<MultiValue>(args);
            depth.set(depth.get() - 1);
            match result {
                Ok(values) => Ok(Ok(values)),
                Err(e) if stop.get().is_some() || is_memory(&e) => Err(e),
                Err(e) => Ok(Err(innermost(&e))),
            }
        }
    };
    let protected = Rc::new(protected);
    let p = protected.clone();
    let pcall = lua.create_function(move |lua, (f, args): (Function, MultiValue)| {
        let mut out = MultiValue::new();
        match p(&f, args)? {
            Ok(values) => {
                out.push_back(LuaValue::Boolean(true));
                out.extend(values);
            }
            Err(message) => {
                out.push_back(LuaValue::Boolean(false));
                out.push_back(LuaValue::String(lua.create_string(message)?));
            }
        }
        Ok(out)
    })?;
    let xpcall = lua.create_function(move |lua, (f, handler): (Function, Function)| {
        let mut out = MultiValue::new();
        match protected(&f, MultiValue::new())? {
            Ok(values) => {
                out.push_back(LuaValue::Boolean(true));
                out.extend(values);
            }
            Err(message) => {
                out.push_back(LuaValue::Boolean(false));
                out.extend(handler.call::<MultiValue>(lua.create_string(message)?)?);
            }
        }
        Ok(out)
    })?;
    let g = lua.globals();
    g.raw_set("pcall", pcall)?;
    g.raw_set("xpcall", xpcall)?;
    Ok(())
}

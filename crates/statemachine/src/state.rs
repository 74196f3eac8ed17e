//! The two kinds of names a graph is made of: steps ([`State`]) and actions ([`Action`]).

use std::fmt::Debug;

/// A step of an operation: a closed set of values with stable PascalCase wire names.
///
/// The wire name is what `status.step.state` stores and what the CRD's step enum and CEL
/// list contain, so it must never change once released. Declare step enums with
/// [`state_enum!`](crate::state_enum), which derives the name from the variant.
///
/// `Ord` orders the reports ([`Graph::declared_states`](crate::Graph::declared_states) and
/// friends); for an enum that is declaration order, which reads as the workflow.
pub trait State: Copy + Eq + Ord + Debug + 'static {
    /// Every value of the type. One enum may be shared by several graphs (one per action),
    /// so a graph usually declares only some of these.
    const ALL: &'static [Self];

    /// The stable wire name, e.g. `"ShuttingDownNode"`.
    fn name(self) -> &'static str;

    /// The value whose [`name`](State::name) is `name`, if any. Exact match: wire names are
    /// case-sensitive, as they are in the CRD's enum.
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|state| state.name() == name)
    }
}

/// What keys a [`MultiGraph`](crate::MultiGraph): the value of an Ops kind's `spec.action`.
///
/// Implemented for `&'static str` and by enums declared with
/// [`action_enum!`](crate::action_enum). The name appears in error messages.
pub trait Action: Copy + Eq + Ord + Debug + 'static {
    /// The wire name, e.g. `"RollingRestart"`.
    fn name(self) -> &'static str;
}

impl Action for &'static str {
    fn name(self) -> &'static str {
        self
    }
}

/// Declares a step enum and implements [`State`] for it, using each variant's identifier
/// as its wire name.
///
/// The macro derives `Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug` and
/// implements `Display` (the wire name); pass any further attributes before `enum`.
///
/// ```
/// simplyblock_statemachine::state_enum! {
///     /// Steps of a two-step request.
///     pub enum Step { Requesting, Awaiting }
/// }
/// use simplyblock_statemachine::State;
/// assert_eq!(Step::from_name("Awaiting"), Some(Step::Awaiting));
/// assert_eq!(Step::Requesting.to_string(), "Requesting");
/// ```
#[macro_export]
macro_rules! state_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $crate::__named_enum! { $(#[$meta])* $vis enum $name { $($(#[$vmeta])* $variant),+ } }

        impl $crate::State for $name {
            const ALL: &'static [Self] = &[$(Self::$variant),+];

            fn name(self) -> &'static str {
                self.as_str()
            }
        }
    };
}

/// Declares an action enum and implements [`Action`] for it, using each variant's
/// identifier as its wire name. Same shape and derives as [`state_enum!`](crate::state_enum);
/// it also adds an inherent `ALL` constant so tests can check that every action has a graph.
///
/// ```
/// simplyblock_statemachine::action_enum! {
///     pub enum ClusterAction { Activate, RollingRestart }
/// }
/// use simplyblock_statemachine::Action;
/// assert_eq!(ClusterAction::RollingRestart.name(), "RollingRestart");
/// assert_eq!(ClusterAction::ALL.len(), 2);
/// ```
#[macro_export]
macro_rules! action_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $crate::__named_enum! { $(#[$meta])* $vis enum $name { $($(#[$vmeta])* $variant),+ } }

        impl $name {
            /// Every action of this kind.
            #[allow(dead_code)]
            $vis const ALL: &'static [Self] = &[$(Self::$variant),+];
        }

        impl $crate::Action for $name {
            fn name(self) -> &'static str {
                self.as_str()
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __named_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// The wire name.
            #[allow(dead_code)]
            $vis const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($variant)),+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::state_enum! {
        enum Step { First, SecondStep }
    }

    crate::action_enum! {
        enum Act { DoIt }
    }

    #[test]
    fn macro_names_are_the_variant_identifiers() {
        assert_eq!(Step::ALL, &[Step::First, Step::SecondStep]);
        assert_eq!(Step::SecondStep.name(), "SecondStep");
        assert_eq!(Step::SecondStep.to_string(), "SecondStep");
        assert_eq!(Act::DoIt.name(), "DoIt");
        assert_eq!(Act::ALL, &[Act::DoIt]);
    }

    #[test]
    fn from_name_is_exact() {
        assert_eq!(Step::from_name("First"), Some(Step::First));
        assert_eq!(Step::from_name("first"), None);
        assert_eq!(Step::from_name(""), None);
        assert_eq!(Step::from_name("First "), None);
    }

    #[test]
    fn ord_is_declaration_order() {
        assert!(Step::First < Step::SecondStep);
    }

    #[test]
    fn str_is_an_action() {
        assert_eq!(Action::name("Restart"), "Restart");
    }
}

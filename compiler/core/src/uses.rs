//! A value's use list: the operand slots that read it.
//!
//! Most values have one or two readers, and a module of 10^6 ops has 10^6
//! of them, so the short list is a plain vector (24 bytes and one small
//! allocation); past [`FEW`] readers it becomes a set (a weight read by
//! 10^6 ops), so that adding, finding and dropping one stays O(1). Both
//! keep the same order: insertion order, a removal moving the last use
//! into the gap (`swap_remove`), so output does not depend on which form a
//! list is in.

use indexmap::IndexSet;

use crate::ir::Use;

/// How many uses a list holds before it becomes a set.
const FEW: usize = 16;

#[derive(Clone, Debug)]
pub enum Uses {
    Few(Vec<Use>),
    Many(Box<IndexSet<Use>>),
}

impl Default for Uses {
    fn default() -> Self {
        Uses::Few(Vec::new())
    }
}

impl Uses {
    /// Adds `u`, unless it is there already.
    pub fn insert(&mut self, u: Use) {
        match self {
            Uses::Few(list) if list.contains(&u) => {}
            Uses::Few(list) if list.len() < FEW => list.push(u),
            Uses::Few(list) => {
                let mut set: IndexSet<Use> = list.drain(..).collect();
                set.insert(u);
                *self = Uses::Many(Box::new(set));
            }
            Uses::Many(set) => {
                set.insert(u);
            }
        }
    }

    /// Removes `u`, moving the last use into its place; whether it was there.
    pub fn swap_remove(&mut self, u: &Use) -> bool {
        match self {
            Uses::Few(list) => match list.iter().position(|x| x == u) {
                Some(i) => {
                    list.swap_remove(i);
                    true
                }
                None => false,
            },
            Uses::Many(set) => set.swap_remove(u),
        }
    }

    pub fn contains(&self, u: &Use) -> bool {
        match self {
            Uses::Few(list) => list.contains(u),
            Uses::Many(set) => set.contains(u),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Uses::Few(list) => list.len(),
            Uses::Many(set) => set.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> Iter<'_> {
        match self {
            Uses::Few(list) => Iter::Few(list.iter()),
            Uses::Many(set) => Iter::Many(set.iter()),
        }
    }
}

/// The uses of a list, in order.
pub enum Iter<'a> {
    Few(std::slice::Iter<'a, Use>),
    Many(indexmap::set::Iter<'a, Use>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Use;

    fn next(&mut self) -> Option<&'a Use> {
        match self {
            Iter::Few(it) => it.next(),
            Iter::Many(it) => it.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Few(it) => it.size_hint(),
            Iter::Many(it) => it.size_hint(),
        }
    }
}

impl Extend<Use> for Uses {
    fn extend<I: IntoIterator<Item = Use>>(&mut self, iter: I) {
        for u in iter {
            self.insert(u);
        }
    }
}

impl<'a> IntoIterator for &'a Uses {
    type Item = &'a Use;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl IntoIterator for Uses {
    type Item = Use;
    type IntoIter = std::vec::IntoIter<Use>;

    fn into_iter(self) -> Self::IntoIter {
        match self {
            Uses::Few(list) => list.into_iter(),
            Uses::Many(set) => set.into_iter().collect::<Vec<_>>().into_iter(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Module, OpBuilder};

    /// The list keeps the order an IndexSet keeps, through the change of
    /// form, duplicates and removals.
    #[test]
    fn the_list_orders_uses_as_a_set_does() {
        let op = Module::new().create_op(OpBuilder::new("test.op"));
        let slot = |index| Use { op, index };
        let mut uses = Uses::default();
        let mut set = IndexSet::new();
        for step in 0..200u32 {
            let u = slot(step * 7 % 41);
            if step % 3 == 2 {
                assert_eq!(uses.swap_remove(&u), set.swap_remove(&u));
            } else {
                uses.insert(u);
                set.insert(u);
            }
            assert!(uses.iter().eq(set.iter()), "step {step}");
            assert_eq!(uses.len(), set.len());
        }
        assert!(matches!(uses, Uses::Many(_)));
    }
}

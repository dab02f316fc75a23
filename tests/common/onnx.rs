//! Small ONNX models built in memory, for the importer's tests.

use ircc_onnx::proto::*;
use prost::Message;

/// A float tensor input or output of the given static shape.
pub fn value_info(name: &str, shape: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: data_type::FLOAT,
                shape: Some(TensorShapeProto {
                    dim: shape
                        .iter()
                        .map(|&d| Dimension {
                            dim_value: Some(d),
                            dim_param: None,
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

/// A model of `nodes` at opset 17 with `output` its only output.
pub fn model(nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, output: &str) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: "test".into(),
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            initializer: vec![],
            input: inputs,
            output: vec![value_info(output, &[])],
        }),
        functions: vec![],
    }
    .encode_to_vec()
}

/// A node with one output.
pub fn node(
    name: &str,
    op: &str,
    inputs: &[&str],
    output: &str,
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        attribute: attrs,
    }
}

/// A model of `nodes` with no inputs, the given initializers, and `y` its
/// output.
pub fn with_initializers(nodes: Vec<NodeProto>, inits: Vec<TensorProto>) -> Vec<u8> {
    let mut m = ModelProto::decode(&model(nodes, vec![], "y")[..]).unwrap();
    m.graph.as_mut().unwrap().initializer = inits;
    m.encode_to_vec()
}

/// An int64 vector initializer.
pub fn int64s(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        dims: vec![v.len() as i64],
        data_type: data_type::INT64,
        int64_data: v.to_vec(),
        name: name.into(),
        ..Default::default()
    }
}

/// A float scalar initializer.
pub fn float_scalar(name: &str, v: f32) -> TensorProto {
    TensorProto {
        data_type: data_type::FLOAT,
        float_data: vec![v],
        name: name.into(),
        ..Default::default()
    }
}
